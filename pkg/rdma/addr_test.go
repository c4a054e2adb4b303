package rdma_test

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
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

// TestCarriesDefaultRoute: the netdev a default route leaves through, in the
// main table or another one, carries it; a netdev with only other routes
// does not.
func TestCarriesDefaultRoute(t *testing.T) {
	ns := netnstest.New(t)
	netnstest.Veth(t, ns, "up1", "up1p")
	netnstest.Veth(t, ns, "up2", "up2p")
	netnstest.Veth(t, ns, "nic3", "nic3p")
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
	got := map[string]bool{}
	for _, name := range []string{"up1", "up2", "nic3"} {
		c, err := a.CarriesDefaultRoute(ns.Handle, name)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = c
	}
	if diff := cmp.Diff(map[string]bool{"up1": true, "up2": true, "nic3": false}, got); diff != "" {
		t.Errorf("carries a default route (-want +got):\n%s", diff)
	}
	if _, err := a.CarriesDefaultRoute(ns.Handle, "nope"); err == nil {
		t.Error("CarriesDefaultRoute of a missing netdev succeeded")
	}
}
