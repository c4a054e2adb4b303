package rdma_test

import (
	"context"
	"net"
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
	h := netnstest.Handle(t, ns)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	// The subscriptions may start after the first change: keep changing
	// until both have reported.
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	gotLink, gotAddr := "", ""
	for i := 0; gotLink == "" || gotAddr == ""; i++ {
		set := h.LinkSetUp
		if i%2 == 1 {
			set = h.LinkSetDown
		}
		if err := set(lo); err != nil {
			t.Fatalf("toggle lo: %v", err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 9, byte(i/250), byte(i%250+1)), Mask: net.CIDRMask(32, 32)}}
		if err := h.AddrAdd(lo, addr); err != nil {
			t.Fatalf("add address: %v", err)
		}
		select {
		case gotLink = <-links:
		case gotAddr = <-addrs:
		case <-deadline.C:
			t.Fatalf("within 5s: link update %q, address update %q", gotLink, gotAddr)
		case <-tick.C:
		}
	}
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
