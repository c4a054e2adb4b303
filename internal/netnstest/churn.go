package netnstest

import (
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// ChurnUntil makes link and address updates in ns until seen returns true:
// every 50 ms it toggles lo up or down and adds a new /32 address to it. A
// netlink subscription may start after the first change, so tests of one
// change again until the subscription has reported. The test fails after
// 5 s; seen is asked after every change.
func ChurnUntil(t testing.TB, ns *NS, seen func() bool) {
	t.Helper()
	h := Handle(t, ns)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
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
		if seen() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no update seen within 5s of link and address changes")
		}
		time.Sleep(50 * time.Millisecond) // the pace of changes, not a wait for a condition
	}
}
