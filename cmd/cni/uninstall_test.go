package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

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
