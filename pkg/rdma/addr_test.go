package rdma_test

import (
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"

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
