package rdma

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ChildKind is the link type of a child netdev: a netdev of its own that a
// pod gets on a NIC it shares with other pods (a shared pool), created on the
// NIC's netdev (the parent), which stays where it is.
type ChildKind string

// Child kinds. Macvlan and IPVLAN children are for Ethernet (RoCE) parents,
// IPoIB children for InfiniBand ones.
const (
	ChildMacvlan ChildKind = "macvlan"
	ChildIPVLAN  ChildKind = "ipvlan"
	ChildIPoIB   ChildKind = "ipoib"
)

// ErrChildKind is returned for a kind this package does not create.
var ErrChildKind = errors.New("unknown child netdev kind")

// Netlink attributes of the link kinds (include/uapi/linux/if_link.h), which
// golang.org/x/sys/unix does not all name.
const (
	iflaMacvlanMode   = 1 // IFLA_MACVLAN_MODE, u32
	macvlanModeBridge = 4 // MACVLAN_MODE_BRIDGE
	iflaIPVLANMode    = 1 // IFLA_IPVLAN_MODE, u16
	iflaIPVLANFlags   = 2 // IFLA_IPVLAN_FLAGS, u16
	ipvlanModeL2      = 0 // IPVLAN_MODE_L2
	ipvlanFBridge     = 0 // bridge between children (neither private nor VEPA)
	iflaIPoIBPKey     = 1 // IFLA_IPOIB_PKEY, u16
	iflaIPoIBMode     = 2 // IFLA_IPOIB_MODE, u16
	iflaIPoIBUmcast   = 3 // IFLA_IPOIB_UMCAST, u16
	ipoibModeDatagram = 0 // IPOIB_MODE_DATAGRAM
)

// ChildConfig is the child netdev to create: its kind, its name in the
// target namespace, and optionally its MTU and MAC (macvlan only: an IPVLAN
// child has its parent's MAC, an IPoIB one an address the HCA gives it).
// PKey is an IPoIB child's partition key (the parent's, so that the child
// is in the parent's partition); 0 leaves it to the kernel, which gives the
// child its parent's.
type ChildConfig struct {
	Kind ChildKind
	Name string
	MTU  int
	MAC  net.HardwareAddr
	PKey uint16
}

// childRequest builds the one RTM_NEWLINK that creates the child of the
// netdev parentIndex (in the namespace the request is sent in) directly in
// the namespace whose file descriptor is nsFD, under its final name and
// up: the kernel resolves IFLA_LINK in the sender's namespace and creates
// the link in the target one, so the child never appears on the host.
func childRequest(parentIndex int, nsFD int, c ChildConfig) (*nl.NetlinkRequest, error) {
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Change = unix.IFF_UP
	msg.Flags = unix.IFF_UP
	req.AddData(msg)
	req.AddData(nl.NewRtAttr(unix.IFLA_LINK, nl.Uint32Attr(uint32(parentIndex))))
	req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(c.Name)))
	req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, nl.Uint32Attr(uint32(nsFD))))
	if c.MTU > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(c.MTU))))
	}
	if len(c.MAC) > 0 {
		if c.Kind != ChildMacvlan {
			return nil, fmt.Errorf("a %s child cannot be given a MAC address", c.Kind)
		}
		req.AddData(nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(c.MAC)))
	}
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated(string(c.Kind)))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	switch c.Kind {
	case ChildMacvlan:
		data.AddRtAttr(iflaMacvlanMode, nl.Uint32Attr(macvlanModeBridge))
	case ChildIPVLAN:
		data.AddRtAttr(iflaIPVLANMode, nl.Uint16Attr(ipvlanModeL2))
		data.AddRtAttr(iflaIPVLANFlags, nl.Uint16Attr(ipvlanFBridge))
	case ChildIPoIB:
		if c.PKey != 0 {
			data.AddRtAttr(iflaIPoIBPKey, nl.Uint16Attr(c.PKey))
		}
		data.AddRtAttr(iflaIPoIBMode, nl.Uint16Attr(ipoibModeDatagram))
		data.AddRtAttr(iflaIPoIBUmcast, nl.Uint16Attr(0))
	default:
		return nil, fmt.Errorf("%w: %q", ErrChildKind, c.Kind)
	}
	req.AddData(info)
	return req, nil
}

// AddChild creates the child c of the netdev parent (in parentNS) in the
// namespace to, up, in one request, and returns it as the kernel has it
// there. On error nothing was created.
func (d Netdevs) AddChild(parentNS netns.NsHandle, parent string, to netns.NsHandle, c ChildConfig) (Link, error) {
	p, err := d.Get(parentNS, parent)
	if err != nil {
		return Link{}, fmt.Errorf("create %s child %q of %q: %w", c.Kind, c.Name, parent, err)
	}
	req, err := childRequest(p.Index, int(to), c)
	if err != nil {
		return Link{}, fmt.Errorf("create %s child %q of %q: %w", c.Kind, c.Name, parent, err)
	}
	sock, err := socketAt(parentNS, unix.NETLINK_ROUTE)
	if err != nil {
		return Link{}, fmt.Errorf("open netlink socket in netns %s: %w", parentNS, err)
	}
	defer sock.Close()
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return Link{}, fmt.Errorf("create %s child %q of %q: %w", c.Kind, c.Name, parent, err)
	}
	l, err := d.Get(to, c.Name)
	if err != nil {
		return Link{}, fmt.Errorf("read %s child %q after creating it: %w", c.Kind, c.Name, err)
	}
	return l, nil
}

// Delete deletes the netdev called name in ns when its MAC is mac (mac ""
// deletes whatever has the name): a child netdev that DEL or a rollback
// removes. A netdev that is not there, or is another (another MAC), is left
// alone: deleted reports whether one was deleted.
func (d Netdevs) Delete(ns netns.NsHandle, name, mac string) (deleted bool, err error) {
	l, err := d.Get(ns, name)
	if errors.Is(err, ErrLinkNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if mac != "" && l.MAC != mac {
		return false, nil
	}
	sock, err := socketAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return false, fmt.Errorf("open netlink socket in netns %s: %w", ns, err)
	}
	defer sock.Close()
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(l.Index)
	req.AddData(msg)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return false, nil
		}
		return false, fmt.Errorf("delete netdev %q: %w", name, err)
	}
	return true, nil
}
