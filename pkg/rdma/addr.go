package rdma

import (
	"fmt"
	"net"
	"strings"

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

// HostUse is what the host has configured on one of its netdevs: what a
// move into a pod's namespace would take from it (the kernel drops a moved
// netdev's addresses and routes, and releases it from its master).
type HostUse struct {
	// DefaultRoute: a default route (IPv4 or IPv6, in any routing table)
	// leaves through the netdev, directly or as one of its multipath next
	// hops: the namespace's own uplink.
	DefaultRoute bool
	// Addrs are its addresses of global or site scope (link-local and
	// host-scope addresses are left out: every netdev that is up has an
	// IPv6 link-local one).
	Addrs []net.IPNet
	// Master and MasterKind name the device it is a port of ("bond0",
	// "bond"; a team, bridge, Open vSwitch bridge or VRF likewise); both ""
	// when it has none.
	Master, MasterKind string
}

// Configured says whether the host uses the netdev beyond its default route:
// addresses of its own, or a master.
func (u HostUse) Configured() bool { return len(u.Addrs) > 0 || u.Master != "" }

// String names what the host has configured, for an error message.
func (u HostUse) String() string {
	var parts []string
	if u.DefaultRoute {
		parts = append(parts, "the default route")
	}
	if len(u.Addrs) > 0 {
		as := make([]string, 0, len(u.Addrs))
		for _, a := range u.Addrs {
			as = append(as, a.String())
		}
		parts = append(parts, "address "+strings.Join(as, ", "))
	}
	if u.Master != "" {
		parts = append(parts, fmt.Sprintf("port of %s %s", u.MasterKind, u.Master))
	}
	return strings.Join(parts, "; ")
}

// HostUse reads what ns has configured on the netdev called ifName: one
// route dump, one address dump and, for a port, one link lookup of its
// master, on one socket.
func (Addresses) HostUse(ns netns.NsHandle, ifName string) (HostUse, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return HostUse{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return HostUse{}, fmt.Errorf("find netdev %q in netns %s: %w", ifName, ns, err)
	}
	var u HostUse
	idx := l.Attrs().Index
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return HostUse{}, fmt.Errorf("list routes in netns %s: %w", ns, err)
	}
	u.DefaultRoute = defaultVia(routes, idx)
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
	if err != nil {
		return HostUse{}, fmt.Errorf("list addresses of %q: %w", ifName, err)
	}
	for _, a := range addrs {
		// RT_SCOPE_UNIVERSE (0) and RT_SCOPE_SITE (200) are below
		// RT_SCOPE_LINK (253) and RT_SCOPE_HOST (254).
		if a.Scope < unix.RT_SCOPE_LINK && a.IPNet != nil {
			u.Addrs = append(u.Addrs, *a.IPNet)
		}
	}
	if m := l.Attrs().MasterIndex; m != 0 {
		ml, err := h.LinkByIndex(m)
		if err != nil {
			return HostUse{}, fmt.Errorf("find the master (index %d) of %q in netns %s: %w", m, ifName, ns, err)
		}
		u.Master, u.MasterKind = ml.Attrs().Name, ml.Type()
	}
	return u, nil
}

// defaultVia reports whether one of routes is a default route that leaves
// through the link with index idx, directly or as a multipath next hop.
func defaultVia(routes []netlink.Route, idx int) bool {
	for _, r := range routes {
		if r.Dst != nil {
			if ones, _ := r.Dst.Mask.Size(); ones != 0 {
				continue
			}
		}
		if r.LinkIndex == idx {
			return true
		}
		for _, nh := range r.MultiPath {
			if nh.LinkIndex == idx {
				return true
			}
		}
	}
	return false
}
