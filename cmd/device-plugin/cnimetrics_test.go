package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/cnimetrics"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// TestCNIMetrics: with --cni-metrics-dir the daemon drains the spool the CNI
// plugin appends to and shows its records on /metrics; the spool ends empty.
func TestCNIMetrics(t *testing.T) {
	dir := cniops.Dir(t.TempDir())
	if err := cniops.Append(dir, cniops.Record{Command: "DEL", Pool: "vf", Code: 11, Duration: 7 * time.Second}); err != nil {
		t.Fatal(err)
	}
	d, _ := startDaemon(t, "--cni-metrics-dir", dir)
	url := "http://" + d.MetricsAddr() + "/metrics"
	want := `kube_rdma_cni_operations_total{code="11",command="DEL",pool="vf"} 1`
	deadline := time.Now().Add(3 * cnimetrics.DefaultInterval)
	for m := get(t, url); !strings.Contains(m, want+"\n"); m = get(t, url) {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s after %s:\n%s", want, 3*cnimetrics.DefaultInterval, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if m := get(t, url); !strings.Contains(m, `kube_rdma_cni_operation_duration_seconds_bucket{command="DEL",pool="vf",le="10"} 1`+"\n") {
		t.Errorf("/metrics lacks the DEL's duration:\n%s", m)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("spool after the record was counted: %v, %v; want empty", ents, err)
	}
}

// TestCNIMetricsOff: without --cni-metrics-dir, no kube_rdma_cni_ series.
func TestCNIMetricsOff(t *testing.T) {
	d, _ := startDaemon(t)
	if m := get(t, "http://"+d.MetricsAddr()+"/metrics"); strings.Contains(m, "kube_rdma_cni_") {
		t.Errorf("kube_rdma_cni_ series without --cni-metrics-dir")
	}
}
