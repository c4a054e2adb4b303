package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestUninstallCommandPoolsFile: `kube-rdma uninstall --pools-file` (the
// chart's hook) removes the node agent's pools file with the binary, and
// writes the marker on which the agent removes it too and writes it no more.
func TestUninstallCommandPoolsFile(t *testing.T) {
	bin, state := t.TempDir(), t.TempDir()
	pools := nodepools.Path(filepath.Join(t.TempDir(), "alloc"))
	if err := nodepools.Write(pools, []byte(`{"version":1,"pools":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, cniinstall.BinaryName), []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if err := uninstallCommand([]string{"--bin-dir", bin, "--state-dir", state, "--pools-file", pools}, &stdout, &stderr); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, stderr.String())
	}
	if _, err := os.Stat(pools); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pools file after uninstall: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(bin, cniinstall.BinaryName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("binary after uninstall: %v, want removed", err)
	}
	if u, err := cniinstall.Uninstalling(bin); err != nil || !u {
		t.Errorf("Uninstalling = %v, %v; want the marker", u, err)
	}
}

// TestUninstallHoldLinger: `uninstall --hold` keeps the marker until SIGTERM
// and --linger after it (helm deletes the hook's pods and the agent's
// DaemonSet in one teardown: an agent still running after the marker went
// can write its pools file again), then removes it and exits 0. A negative
// --linger is a usage error.
func TestUninstallHoldLinger(t *testing.T) {
	if err := uninstallCommand([]string{"--bin-dir", t.TempDir(), "--hold", "--linger", "-1s"}, &bytes.Buffer{}, &bytes.Buffer{}); !errors.Is(err, cli.ErrUsage) {
		t.Errorf("--linger -1s: %v, want a usage error", err)
	}
	bin, state := t.TempDir(), t.TempDir()
	const linger = 700 * time.Millisecond
	cmd := binaryCommand("uninstall", "--bin-dir="+bin, "--state-dir="+state, "--hold", "--linger="+linger.String())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	marked := func() bool {
		u, err := cniinstall.Uninstalling(bin)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// "uninstalled" is logged after the work, once the signal handler is in place.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(errb.String(), `"uninstalled"`); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not uninstalled after 10s; stderr %s", errb.String())
		}
	}
	if !marked() {
		t.Fatal("no marker while holding")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termed := time.Now()
	time.Sleep(linger / 2)
	if !marked() {
		t.Errorf("marker gone %v after SIGTERM, want it kept for --linger %v", time.Since(termed).Round(time.Millisecond), linger)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr %s", err, errb.String())
	}
	if took := time.Since(termed); took < linger {
		t.Errorf("exited %v after SIGTERM, want at least --linger %v", took, linger)
	}
	if marked() {
		t.Error("marker left after the hold ended")
	}
}
