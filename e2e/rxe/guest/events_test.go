//go:build rxe_guest

package guest

import (
	"context"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestEventWatchersOpen: the node watcher's netlink event sources (pkg/rdma WatchLinks and
// WatchAddrs) open on the guests' kernel and report a new link and its address. WatchAddrs
// once opened a socket of every netlink family, and this kernel has no xfrm_user: it failed
// with "protocol not supported", and the daemon fell back to its 500 ms re-read (the cluster
// runs' port-down figure measured that re-read).
func TestEventWatchersOpen(t *testing.T) {
	requireGuest(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	links, addrs := make(chan string, 256), make(chan string, 256)
	send := func(ch chan string) func(string) {
		return func(name string) {
			select {
			case ch <- name:
			default:
			}
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- rdma.WatchLinks(ctx, netns.None(), send(links)) }()
	go func() { errc <- rdma.WatchAddrs(ctx, netns.None(), send(addrs)) }()
	select {
	case err := <-errc:
		t.Fatalf("a watcher ended at start: %v", err)
	case <-time.After(time.Second): // both subscribed
	}
	mustRun(t, "", "ip", "link", "add", "wev0", "type", "veth", "peer", "name", "wev1")
	cleanupRun(t, "", "ip", "link", "del", "wev0")
	mustRun(t, "", "ip", "addr", "add", "192.0.2.77/32", "dev", "wev0")
	for what, ch := range map[string]chan string{"link": links, "address": addrs} {
		deadline := time.After(10 * time.Second)
	wait:
		for {
			select {
			case name := <-ch:
				if name == "wev0" {
					break wait
				}
			case err := <-errc:
				t.Fatalf("a watcher ended: %v", err)
			case <-deadline:
				t.Fatalf("no %s update naming wev0 within 10 s", what)
			}
		}
	}
}
