package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
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
// intervals) has passed, and /metrics counts it. The restore is the
// installed plugin's: `kube-rdma reclaim` from --cni-bin-dir (built here
// from cmd/cni); without it the record stays and the failure is counted and
// logged. The record's device was already returned and it names no IPAM, so
// the pass changes no link of the test's netns (pkg/cnireclaim's tests move
// real ones).
func TestReclaimWired(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the reclaimer's pass takes the host's netlink handles and the plugin's lock as the daemon does: needs root (CAP_NET_ADMIN)")
	}
	binDir := t.TempDir()
	// First without the plugin in the bin dir: nothing is restored.
	runReclaimDaemon(t, binDir, func(store attachment.Store, key attachment.Key, metrics func() string, logs *lockedBuffer) {
		waitUntil(t, "the failure counted", func() bool {
			return strings.Contains(metrics(), `kube_rdma_device_plugin_cni_attachments_reclaimed_total{result="failure"}`)
		})
		if _, err := store.Load(key); err != nil {
			t.Errorf("the record went without the installed plugin: %v", err)
		}
		if !strings.Contains(logs.String(), "did not reclaim the attachment") {
			t.Errorf("no log names the installed plugin's failure:\n%s", logs.String())
		}
	})
	build := exec.Command("go", "build", "-o", filepath.Join(binDir, "kube-rdma"), "github.com/kube-rdma/kube-rdma/cmd/cni")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the CNI plugin: %v\n%s", err, out)
	}
	runReclaimDaemon(t, binDir, func(store attachment.Store, key attachment.Key, metrics func() string, logs *lockedBuffer) {
		waitUntil(t, "the record reclaimed", func() bool {
			_, err := store.Load(key)
			return err != nil
		})
		// The pass removes the record before it counts and logs it: wait for
		// both rather than read them the moment the file is gone.
		const series = `kube_rdma_device_plugin_cni_attachments_reclaimed_total{result="success"} 1`
		waitUntil(t, "/metrics to count the reclaim ("+series+")", func() bool {
			return strings.Contains(metrics(), series)
		})
		waitUntil(t, "the log to say the attachment was reclaimed", func() bool {
			return strings.Contains(logs.String(), "reclaimed a CNI attachment")
		})
	})
}

// runReclaimDaemon runs the daemon with the reclaimer on a record whose
// netns is gone, calls check, and stops it.
func runReclaimDaemon(t *testing.T, binDir string, check func(store attachment.Store, key attachment.Key, metrics func() string, logs *lockedBuffer)) {
	t.Helper()
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
		"--cni-reclaim-state-dir", store.Dir, "--cni-reclaim-interval", "20ms", "--cni-bin-dir", binDir}, &bytes.Buffer{}, logs)
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
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		wait()
	}()
	check(store, key, func() string { return get(t, "http://"+d.MetricsAddr()+"/metrics") }, logs)
}
