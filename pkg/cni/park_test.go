package cni

import (
	"os"
	"path/filepath"
	"testing"
)

// TestParkOff: a park file naming a step parks the first process that
// reaches it only in the e2e's build (tag kuberdma_e2e, park_e2e.go; its
// test there); in this build mark goes on and leaves the file alone.
func TestParkOff(t *testing.T) {
	if parkBuilt {
		t.Skip("built with kuberdma_e2e: TestParkParks covers the hook")
	}
	dir := t.TempDir()
	t.Setenv("KUBE_RDMA_E2E_PARK_DIR", dir)
	if err := os.WriteFile(filepath.Join(dir, "park"), []byte("move\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mark("move") // would never return if it parked
	if _, err := os.Stat(filepath.Join(dir, "park")); err != nil {
		t.Errorf("the park file was taken in the shipped build: %v", err)
	}
}
