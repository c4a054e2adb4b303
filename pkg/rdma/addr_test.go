package rdma_test

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vishvananda/netlink"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestAddresses puts an address and a route on a veth end in a throw-away
// netns and reads them back from the kernel.
func TestAddresses(t *testing.T) {
	ns := netnstest.New(t)
	netnstest.Veth(t, ns, "net1", "net1p")
	h := netnstest.Handle(t, ns)
	l, _ := h.LinkByName("net1")
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	_, addr, _ := net.ParseCIDR("10.20.0.2/24")
	addr.IP = net.ParseIP("10.20.0.2").To4()
	_, dst, _ := net.ParseCIDR("10.30.0.0/16")
	var a rdma.Addresses
	if err := a.Configure(ns.Handle, "net1", []net.IPNet{*addr}, []rdma.Route{{Dst: *dst, GW: net.ParseIP("10.20.0.1"), MTU: 1400}}); err != nil {
		t.Fatal(err)
	}
	got, err := a.List(ns.Handle, "net1")
	if err != nil {
		t.Fatal(err)
	}
	var s []string
	for _, g := range got {
		if g.IP.To4() != nil {
			s = append(s, g.String())
		}
	}
	if diff := cmp.Diff([]string{"10.20.0.2/24"}, s); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	routes, err := h.RouteList(l, 2 /* AF_INET */)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range routes {
		found = found || r.Dst != nil && r.Dst.String() == "10.30.0.0/16" && r.Gw.Equal(net.ParseIP("10.20.0.1")) && r.MTU == 1400
	}
	if !found {
		t.Errorf("route 10.30.0.0/16 via 10.20.0.1 mtu 1400 missing: %v", routes)
	}
	if _, err := a.List(ns.Handle, "nope"); err == nil {
		t.Error("List of a missing netdev succeeded")
	}
}

// TestHostUse: the netdev a default route leaves through, in the main table
// or another one, carries it; a netdev with only other routes does not. Its
// global addresses are listed, its IPv6 link-local one is not; a bridge port
// names its bridge. (This kernel has no bond, team or VRF link types: the
// master is read the same way whatever its kind.)
func TestHostUse(t *testing.T) {
	ns := netnstest.New(t)
	netnstest.Veth(t, ns, "up1", "up1p")
	netnstest.Veth(t, ns, "up2", "up2p")
	netnstest.Veth(t, ns, "nic3", "nic3p")
	netnstest.Veth(t, ns, "nic4", "nic4p")
	netnstest.Veth(t, ns, "nic5", "nic5p")
	h := netnstest.Handle(t, ns)
	var a rdma.Addresses
	for i, name := range []string{"up1", "up2", "nic3"} {
		l, _ := h.LinkByName(name)
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		ip := net.IPv4(10, byte(20+i), 0, 2).To4()
		_, other, _ := net.ParseCIDR("10.99.0.0/16")
		var routes []rdma.Route
		if name == "nic3" {
			routes = []rdma.Route{{Dst: *other, GW: net.IPv4(10, 22, 0, 1)}}
		}
		if err := a.Configure(ns.Handle, name, []net.IPNet{{IP: ip, Mask: net.CIDRMask(24, 32)}}, routes); err != nil {
			t.Fatal(err)
		}
	}
	_, def, _ := net.ParseCIDR("0.0.0.0/0")
	up1, _ := h.LinkByName("up1")
	if err := h.RouteAdd(&netlink.Route{LinkIndex: up1.Attrs().Index, Dst: def, Gw: net.IPv4(10, 20, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	up2, _ := h.LinkByName("up2")
	if err := h.RouteAdd(&netlink.Route{LinkIndex: up2.Attrs().Index, Gw: net.IPv4(10, 21, 0, 1), Table: 100}); err != nil {
		t.Fatal(err)
	}
	// nic4: up, with only the IPv6 link-local address the kernel gives it,
	// and one added by hand.
	nic4, _ := h.LinkByName("nic4")
	if err := h.LinkSetUp(nic4); err != nil {
		t.Fatal(err)
	}
	ll := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("fe80::77"), Mask: net.CIDRMask(64, 128)}}
	if err := h.AddrAdd(nic4, ll); err != nil {
		t.Fatal(err)
	}
	// nic5: a port of bridge br0, no address.
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := h.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	nic5, _ := h.LinkByName("nic5")
	if err := h.LinkSetMaster(nic5, br); err != nil {
		t.Fatal(err)
	}
	want := map[string]rdma.HostUse{
		"up1":  {DefaultRoute: true, Addrs: []net.IPNet{{IP: net.IPv4(10, 20, 0, 2).To4(), Mask: net.CIDRMask(24, 32)}}},
		"up2":  {DefaultRoute: true, Addrs: []net.IPNet{{IP: net.IPv4(10, 21, 0, 2).To4(), Mask: net.CIDRMask(24, 32)}}},
		"nic3": {Addrs: []net.IPNet{{IP: net.IPv4(10, 22, 0, 2).To4(), Mask: net.CIDRMask(24, 32)}}},
		"nic4": {},
		"nic5": {Master: "br0", MasterKind: "bridge"},
	}
	got := map[string]rdma.HostUse{}
	for name := range want {
		u, err := a.HostUse(ns.Handle, name)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = u
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("host use (-want +got):\n%s", diff)
	}
	if !got["nic3"].Configured() || !got["nic5"].Configured() || got["nic4"].Configured() {
		t.Errorf("Configured: nic3 %v, nic5 %v, nic4 %v; want true, true, false",
			got["nic3"].Configured(), got["nic5"].Configured(), got["nic4"].Configured())
	}
	if s := got["up1"].String(); s != "the default route; address 10.20.0.2/24" {
		t.Errorf("up1's use reads %q", s)
	}
	if s := got["nic5"].String(); s != "port of bridge br0" {
		t.Errorf("nic5's use reads %q", s)
	}
	if _, err := a.HostUse(ns.Handle, "nope"); err == nil {
		t.Error("HostUse of a missing netdev succeeded")
	}
}
