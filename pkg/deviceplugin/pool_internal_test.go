package deviceplugin

import (
	"log/slog"
	"os"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
)

// TestReserveKeepsSocket re-serves right after serving, as the daemon does
// when the kubelet restarts: the first server's listener, closed late by a
// Serve goroutine that starts after stop, must not unlink the new socket.
func TestReserveKeepsSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // unix socket paths are short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := newPoolServer(config.Pool{Name: "hca", Mode: config.Exclusive}, "rdma.example.com/hca", dir, 1,
		allocContext{}, nil, slog.New(slog.DiscardHandler), nil)
	defer s.stop()
	for i := range 200 {
		if err := s.serve(); err != nil {
			t.Fatal(err)
		}
		if !s.serving() {
			t.Fatalf("serve %d: socket %s gone", i, s.socketPath())
		}
	}
}
