package rdma

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Route is a route to put on an interface: to Dst via GW (nil: on-link),
// with MTU when not 0.
type Route struct {
	Dst net.IPNet
	GW  net.IP
	MTU int
}

// Addresses puts addresses and routes on a netdev and reads them back,
// through a netlink socket bound to the namespace each call names. The zero
// value is ready to use.
type Addresses struct{}

// Configure adds addrs and then routes to the netdev called ifName in ns.
func (Addresses) Configure(ns netns.NsHandle, ifName string, addrs []net.IPNet, routes []Route) error {
	h, err := routeHandle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("find netdev %q in netns %s: %w", ifName, ns, err)
	}
	for _, a := range addrs {
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.IP, Mask: a.Mask}}); err != nil {
			return fmt.Errorf("add address %s to %q: %w", a.String(), ifName, err)
		}
	}
	for _, r := range routes {
		rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: r.Dst.IP, Mask: r.Dst.Mask}, Gw: r.GW, MTU: r.MTU}
		if err := h.RouteAdd(rt); err != nil {
			return fmt.Errorf("add route %s via %s on %q: %w", r.Dst.String(), r.GW, ifName, err)
		}
	}
	return nil
}

// List returns the addresses of the netdev called ifName in ns.
func (Addresses) List(ns netns.NsHandle, ifName string) ([]net.IPNet, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("find netdev %q in netns %s: %w", ifName, ns, err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("list addresses of %q: %w", ifName, err)
	}
	out := make([]net.IPNet, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, *a.IPNet)
	}
	return out, nil
}

// CarriesDefaultRoute reports whether a default route (IPv4 or IPv6, in any
// routing table) of ns leaves through the netdev called ifName, directly or
// as one of its multipath next hops: the namespace's own uplink.
func (Addresses) CarriesDefaultRoute(ns netns.NsHandle, ifName string) (bool, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return false, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return false, fmt.Errorf("find netdev %q in netns %s: %w", ifName, ns, err)
	}
	idx := l.Attrs().Index
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return false, fmt.Errorf("list routes in netns %s: %w", ns, err)
	}
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if r.LinkIndex == idx {
			return true, nil
		}
		for _, nh := range r.MultiPath {
			if nh.LinkIndex == idx {
				return true, nil
			}
		}
	}
	return false, nil
}
