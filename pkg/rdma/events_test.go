package rdma_test

import (
	"context"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestWatchLinksAndAddrs toggles lo and adds addresses to it in a fresh
// namespace until both subscriptions have reported.
func TestWatchLinksAndAddrs(t *testing.T) {
	ns := netnstest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	links, addrs := make(chan string, 16), make(chan string, 16)
	done := make(chan error, 2)
	go func() {
		done <- rdma.WatchLinks(ctx, ns.Handle, func(l string) {
			select {
			case links <- l:
			default:
			}
		})
	}()
	go func() {
		done <- rdma.WatchAddrs(ctx, ns.Handle, func(i string) {
			select {
			case addrs <- i:
			default:
			}
		})
	}()
	gotLink, gotAddr := "", ""
	netnstest.ChurnUntil(t, ns, func() bool {
		for {
			select {
			case gotLink = <-links:
			case gotAddr = <-addrs:
			default:
				return gotLink != "" && gotAddr != ""
			}
		}
	})
	if gotLink != "lo" {
		t.Errorf("link update for %q, want lo", gotLink)
	}
	if gotAddr != "lo" {
		t.Errorf("address update for %q, want lo", gotAddr)
	}
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	}
}
