package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/internal/podprobe"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestProbe: `probe ready` fails while no kubelet takes the pool's
// registration and succeeds once one does; `probe live` succeeds once the
// first scan is done; both fail once the daemon has stopped (its socket is
// gone), and against another pod's socket path they would reach nothing.
func TestProbe(t *testing.T) {
	t.Setenv("NODE_NAME", "n")
	tree, err := nodesim.Build(t.TempDir(), nodesim.HGX())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "probe") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kdir, sock := filepath.Join(dir, "k"), filepath.Join(dir, "probe.sock")
	if err := os.Mkdir(kdir, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- dispatch(ctx, []string{"run", "--kubelet-dir", kdir, "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot,
			"--dev-root", t.TempDir(), "--cdi-dir", "", "--alloc-dir", "", "--pools-file", "", "--metrics-addr", "", "--log-level", "error",
			"--probe-socket", sock}, io.Discard, io.Discard)
	}()
	stop := sync.OnceValue(func() error {
		cancel()
		return <-done
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	})
	probe := func(check string) error {
		return dispatch(context.Background(), []string{"probe", check, "--socket", sock, "--timeout", "2s"}, io.Discard, io.Discard)
	}
	waitProbe := func(check string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for err := probe(check); err != nil; err = probe(check) {
			if time.Now().After(deadline) {
				t.Fatalf("probe %s: %v", check, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitProbe("live")
	// No kubelet: the pool is served but not registered.
	if err := probe("ready"); !errors.Is(err, podprobe.ErrNotYet) {
		t.Errorf("probe ready without a kubelet: %v, want ErrNotYet", err)
	}
	k, err := kubeletstub.Start(kdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	waitProbe("ready")
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, check := range []string{"ready", "live"} {
		var errOut bytes.Buffer
		err := dispatch(context.Background(), []string{"probe", check, "--socket", sock}, io.Discard, &errOut)
		if err == nil || errors.Is(err, podprobe.ErrNotYet) {
			t.Errorf("probe %s after the daemon stopped: %v, want an error that is not ErrNotYet", check, err)
		}
	}
}
