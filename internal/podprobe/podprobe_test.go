package podprobe

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "probe") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filepath.Join(dir, "probe.sock")
}

// TestChecks: a check fails with ErrNotYet until its channel closes, then
// holds; an unknown check and a socket nobody serves fail otherwise; a file
// left at the path by a previous container is replaced.
func TestChecks(t *testing.T) {
	path := socketPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil { // a previous container's leftover
		t.Fatal(err)
	}
	ready, live := make(chan struct{}), make(chan struct{})
	close(live)
	s, err := Listen(path, Checks{"ready": ready, "live": live})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := func(name string) error { return Check(ctx, path, name) }
	if err := check("live"); err != nil {
		t.Errorf("live: %v, want nil", err)
	}
	if err := check("ready"); !errors.Is(err, ErrNotYet) {
		t.Errorf("ready before its channel closed: %v, want ErrNotYet", err)
	}
	close(ready)
	if err := check("ready"); err != nil {
		t.Errorf("ready: %v, want nil", err)
	}
	if err := check("nonsense"); err == nil || errors.Is(err, ErrNotYet) {
		t.Errorf("unknown check: %v, want another error", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v, want removed", err)
	}
	if err := check("live"); err == nil || errors.Is(err, ErrNotYet) {
		t.Errorf("live with no server: %v, want an error that is not ErrNotYet", err)
	}
}
