//go:build kuberdma_e2e

package cni

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestParkParks: the e2e build parks at the named step, takes the park file
// (parked.<pid>) and goes on once that file is removed; another step goes on.
func TestParkParks(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ParkDirEnv, dir)
	if err := os.WriteFile(filepath.Join(dir, "park"), []byte("move\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mark("record1") // not the step: goes on
	done := make(chan struct{})
	go func() { mark("move"); close(done) }()
	parked := filepath.Join(dir, "parked."+strconv.Itoa(os.Getpid()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(parked); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mark(\"move\") did not take the park file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("mark(\"move\") went on while parked")
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.Remove(parked); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("mark(\"move\") still parked after its file was removed")
	}
}
