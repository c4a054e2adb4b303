package rdma_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

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

// TestWatchAddrsDropsGoneLinks: the address updates of a link deleted with
// its addresses (a pod's host-side veth going away) are not reported as ""
// (which makes the node watcher re-read every device); updates of links that
// exist still name them.
func TestWatchAddrsDropsGoneLinks(t *testing.T) {
	ns := netnstest.New(t)
	h := netnstest.Handle(t, ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []string
	// While hold is set the callback waits for gate: the updates queued
	// meanwhile are looked up after their links are gone, as on a busy
	// node where the watcher lags behind the pods' churn.
	var hold atomic.Bool
	gate := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- rdma.WatchAddrs(ctx, ns.Handle, func(l string) {
			if hold.Load() {
				<-gate
			}
			mu.Lock()
			got = append(got, l)
			mu.Unlock()
		})
	}()
	seen := func(name string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(got, name)
		}
	}
	netnstest.ChurnUntil(t, ns, seen("lo")) // the subscription is up
	hold.Store(true)
	for i := range 5 {
		name := fmt.Sprintf("gone%d", i)
		netnstest.Veth(t, ns, name, name+"p")
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 4 {
			addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 8, byte(i), byte(j+1)), Mask: net.CIDRMask(32, 32)}}
			if err := h.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.LinkDel(l); err != nil {
			t.Fatal(err)
		}
	}
	// Updates arrive in order: once a later change of lo is seen, every
	// update of the deleted links has been handled.
	mu.Lock()
	got = nil
	mu.Unlock()
	hold.Store(false)
	close(gate)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 7, 0, 1), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !seen("lo")(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the address update of lo not seen within 5s")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.Contains(got, "") {
		t.Errorf("address updates reported %q: a gone link's updates reported as unknown", got)
	}
}
