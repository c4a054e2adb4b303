package cnimetrics

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// scrape returns the registry's /metrics page, as Prometheus reads it.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSpoolToMetrics: records the CNI plugin appends (cniops.Append, as its
// Main does) reach /metrics as counters by pool and code and histograms by
// pool, a torn line is counted as dropped, and the spool ends empty.
func TestSpoolToMetrics(t *testing.T) {
	state := t.TempDir()
	dir := cniops.Dir(state)
	for _, r := range []cniops.Record{
		{Command: "ADD", Pool: "gpu-nics", Code: 0, Duration: 30 * time.Millisecond},
		{Command: "ADD", Pool: "gpu-nics", Code: 0, Duration: 70 * time.Millisecond},
		{Command: "ADD", Pool: "gpu-nics", Code: 102, Duration: 3 * time.Millisecond},
		{Command: "DEL", Pool: "gpu-nics", Code: 11, Duration: 6 * time.Second},
	} {
		if err := cniops.Append(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, cniops.FileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"v":1,"cmd":"DE`) // a plugin killed mid-write
	_ = f.Close()

	c := New(Config{Dir: dir})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	c.Drain()
	if got := scrape(t, reg); strings.Contains(got, "kube_rdma_cni_operations_total{") {
		t.Errorf("records counted on the Drain that took them, want the next:\n%s", got)
	}
	c.Drain()
	got := scrape(t, reg)
	for _, want := range []string{
		`kube_rdma_cni_operations_total{code="0",command="ADD",pool="gpu-nics"} 2`,
		`kube_rdma_cni_operations_total{code="102",command="ADD",pool="gpu-nics"} 1`,
		`kube_rdma_cni_operations_total{code="11",command="DEL",pool="gpu-nics"} 1`,
		`kube_rdma_cni_operation_duration_seconds_bucket{command="ADD",pool="gpu-nics",le="0.005"} 1`,
		`kube_rdma_cni_operation_duration_seconds_bucket{command="ADD",pool="gpu-nics",le="0.05"} 2`,
		`kube_rdma_cni_operation_duration_seconds_bucket{command="ADD",pool="gpu-nics",le="0.1"} 3`,
		`kube_rdma_cni_operation_duration_seconds_bucket{command="DEL",pool="gpu-nics",le="5"} 0`,
		`kube_rdma_cni_operation_duration_seconds_bucket{command="DEL",pool="gpu-nics",le="10"} 1`,
		`kube_rdma_cni_spool_lines_dropped_total{reason="malformed"} 1`,
		`kube_rdma_cni_spool_lines_dropped_total{reason="newer"} 0`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("/metrics lacks %s\n%s", want, got)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Errorf("spool after two drains: %v, %v; want empty", ents, err)
	}
}

// TestRun: a record appended while Run runs shows on /metrics within a few
// intervals, and Run returns when ctx ends.
func TestRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), cniops.DirName)
	c := New(Config{Dir: dir, Interval: 10 * time.Millisecond})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	if err := cniops.Append(dir, cniops.Record{Command: "GC", Code: 0, Duration: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	want := `kube_rdma_cni_operations_total{code="0",command="GC",pool=""} 1`
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(scrape(t, reg), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

type posted struct{ namespace, name, uid, reason, message string }

type recordPoster struct{ got []posted }

func (r *recordPoster) Warn(namespace, name, uid, reason, message string) {
	r.got = append(r.got, posted{namespace, name, uid, reason, message})
}

// TestGiveUps: give-ups the CNI plugin leaves (cniops.AppendGiveUp, as its
// DEL does) are counted by reason, and the one whose record named its pod
// is posted on that pod as a Warning Event naming the device and why; the
// give-up spool ends empty.
func TestGiveUps(t *testing.T) {
	dir := cniops.Dir(t.TempDir())
	for _, g := range []cniops.GiveUp{
		{Command: "DEL", ContainerID: "c1", IfName: "net1", PodNamespace: "ml", PodName: "trainer-0", PodUID: "u-1",
			RDMA: "mlx5_3", Netdev: "ens1f0v2", PodIfName: "net1", Function: "0000:3b:00.3", Reason: cniops.GiveUpNotBack, Waited: 90 * time.Second},
		{Command: "GC", ContainerID: "c2", IfName: "net1", RDMA: "mlx5_9", Netdev: "enp59s0f0s2", Function: "mlx5_core.sf.2",
			Reason: cniops.GiveUpGone},
	} {
		if err := cniops.AppendGiveUp(dir, g); err != nil {
			t.Fatal(err)
		}
	}
	ev := &recordPoster{}
	c := New(Config{Dir: dir, Events: ev})
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	c.Drain()
	c.Drain()
	page := scrape(t, reg)
	for _, want := range []string{
		`kube_rdma_cni_devices_given_up_total{reason="function-gone"} 1`,
		`kube_rdma_cni_devices_given_up_total{reason="not-back"} 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, page)
		}
	}
	if len(ev.got) != 1 {
		t.Fatalf("Events posted: %+v, want one (the give-up whose record named its pod)", ev.got)
	}
	e := ev.got[0]
	if e.namespace != "ml" || e.name != "trainer-0" || e.uid != "u-1" || e.reason != EventReasonGivenUp {
		t.Errorf("Event on %s/%s (%s), reason %s", e.namespace, e.name, e.uid, e.reason)
	}
	for _, w := range []string{"mlx5_3", "ens1f0v2", "net1 in the pod", "1m30s", "rejoins its pool"} {
		if !strings.Contains(e.message, w) {
			t.Errorf("Event message %q does not say %q", e.message, w)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the spool holds %d files after two drains, want none", len(ents))
	}
}

// TestRecentGiveUps: the give-ups drained are kept for the node state,
// newest first, the last MaxRecentGiveUps, none older than RecentGiveUps.
func TestRecentGiveUps(t *testing.T) {
	dir := cniops.Dir(t.TempDir())
	t0 := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	c := New(Config{Dir: dir})
	if got := c.GiveUps(t0); got != nil {
		t.Fatalf("before any give-up: %+v", got)
	}
	n := MaxRecentGiveUps + 5
	for i := range n {
		g := cniops.GiveUp{Time: t0.Add(time.Duration(i) * time.Minute), Command: "DEL", ContainerID: fmt.Sprintf("c%d", i), IfName: "net1",
			RDMA: fmt.Sprintf("mlx5_%d", i), Netdev: "eth9", Function: "0000:3b:00.3", Reason: cniops.GiveUpNotBack}
		if err := cniops.AppendGiveUp(dir, g); err != nil {
			t.Fatal(err)
		}
		if i == 2 { // two drains: some records arrive after the first
			c.Drain()
		}
	}
	c.Drain()
	c.Drain() // a file is read one drain after it is taken
	last := t0.Add(time.Duration(n-1) * time.Minute)
	got := c.GiveUps(last)
	if len(got) != MaxRecentGiveUps {
		t.Fatalf("%d give-ups kept, want %d", len(got), MaxRecentGiveUps)
	}
	for i, g := range got {
		if want := fmt.Sprintf("mlx5_%d", n-1-i); g.RDMA != want {
			t.Errorf("give-up %d is %s, want %s (newest first)", i, g.RDMA, want)
		}
	}
	// A day after the tenth newest, only the nine newer ones remain.
	later := got[9].Time.Add(RecentGiveUps + time.Second)
	if got := c.GiveUps(later); len(got) != 9 || got[0].RDMA != fmt.Sprintf("mlx5_%d", n-1) {
		t.Errorf("a day later: %d give-ups, want the 9 newest", len(got))
	}
}
