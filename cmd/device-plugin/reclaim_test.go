package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// TestReclaimWired: with --cni-reclaim-state-dir the daemon runs the
// reclaimer: a record whose pod netns path is gone, without a kubelet to ask
// (no --pod-resources-socket), is removed once the grace period (two
// intervals) has passed, and /metrics counts it. The record's device was
// already returned and it names no IPAM, so the pass changes no link of the
// test's netns (pkg/cnireclaim's tests move real ones).
func TestReclaimWired(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the reclaimer's pass takes the host's netlink handles and the plugin's lock as the daemon does: needs root (CAP_NET_ADMIN)")
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "sys/kernel/random"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "sys/kernel/random/boot_id"), []byte("boot-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := attachment.Store{Dir: t.TempDir(), BootID: "boot-1"}
	key := attachment.Key{ContainerID: "c1", IfName: "eth0"}
	rec := attachment.Attachment{Key: key, Netns: filepath.Join(t.TempDir(), "cni-gone"), Network: "rdma", Complete: true,
		Pod:     &attachment.PodRef{Namespace: "ns", Name: "p1"},
		Devices: []attachment.Device{{RDMA: "mlx5_0", Host: attachment.HostLink{Name: "nic0"}, PodIfName: "net1", Returned: true}}}
	if err := store.Save(rec); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cfg, err := parseRunFlags([]string{"--kubelet-dir", t.TempDir(), "--sysfs-root", tree.SysRoot, "--proc-root", proc, "--dev-root", t.TempDir(),
		"--metrics-addr", "127.0.0.1:0", "--cdi-dir", "", "--alloc-dir", "", "--pools-file", "", "--node-state=false", "--pod-resources-socket", "",
		"--cni-reclaim-state-dir", store.Dir, "--cni-reclaim-interval", "20ms", "--cni-bin-dir", t.TempDir()}, &bytes.Buffer{}, logs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Events = []agent.EventSource{}
	d, _, err := newAgent(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := startReclaim(ctx, cfg, d)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		wait()
	})
	waitUntil(t, "the record reclaimed", func() bool {
		_, err := store.Load(key)
		return err != nil
	})
	// The pass removes the record before it counts and logs it: wait for
	// both rather than read them the moment the file is gone.
	const series = `kube_rdma_device_plugin_cni_attachments_reclaimed_total{result="success"} 1`
	waitUntil(t, "/metrics to count the reclaim ("+series+")", func() bool {
		return strings.Contains(get(t, "http://"+d.MetricsAddr()+"/metrics"), series)
	})
	waitUntil(t, "the log to say the attachment was reclaimed", func() bool {
		return strings.Contains(logs.String(), "reclaimed a CNI attachment")
	})
}
