package rdma

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrLinkNotFound is returned when no netdev of that name or index exists in
// the namespace asked about.
var ErrLinkNotFound = errors.New("netdev not found")

// Link is the part of a netdev's state the plugin records and restores.
type Link struct {
	Name  string
	Index int
	MTU   int
	MAC   string // "aa:bb:cc:dd:ee:ff", lower case
	Up    bool   // administratively up (IFF_UP)
}

// LinkConfig is the state a netdev must have after Move or Set. Zero fields
// are left as they are, except Up, which is always applied.
type LinkConfig struct {
	Name string
	MTU  int
	MAC  net.HardwareAddr
	Up   bool
}

// Netdevs reads and changes netdevs through netlink sockets bound to the
// namespace each call names. The zero value is ready to use.
type Netdevs struct{}

func linkOf(l netlink.Link) Link {
	a := l.Attrs()
	return Link{Name: a.Name, Index: a.Index, MTU: a.MTU, MAC: a.HardwareAddr.String(), Up: a.Flags&net.FlagUp != 0}
}

func routeHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	h, err := handleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket in netns %s: %w", ns, err)
	}
	return h, nil
}

func notFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV)
}

// Get returns the netdev called name in ns; ErrLinkNotFound when absent.
func (Netdevs) Get(ns netns.NsHandle, name string) (Link, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return Link{}, err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if notFound(err) {
		return Link{}, fmt.Errorf("get netdev %q: %w", name, ErrLinkNotFound)
	}
	if err != nil {
		return Link{}, fmt.Errorf("get netdev %q: %w", name, err)
	}
	return linkOf(l), nil
}

// List returns every netdev in ns.
func (Netdevs) List(ns netns.NsHandle) ([]Link, error) {
	h, err := routeHandle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ls, err := retryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list netdevs: %w", err)
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		out = append(out, linkOf(l))
	}
	return out, nil
}

// Move moves the netdev l (as Get returned it) from one namespace to
// another and gives it want's name, MTU, MAC and up state there, in one
// RTM_SETLINK request: a namespace move costs an RCU grace period (about
// 20 ms), so it is done once. The kernel applies the request in steps (move,
// then MAC, MTU, name, flags); if a later step fails the device has already
// moved, so Move sends it back with its original attributes before
// returning the error: on error the device is where it was, under its
// original name. On success it returns the device's new state without
// asking the kernel again.
func (d Netdevs) Move(from netns.NsHandle, l Link, to netns.NsHandle, want LinkConfig) (Link, error) {
	if want.Name == "" {
		want.Name = l.Name
	}
	if err := setLink(from, l.Index, to, want); err != nil {
		err = fmt.Errorf("move netdev %q to netns %s as %q: %w", l.Name, to, want.Name, err)
		if rerr := d.undoPartialMove(from, l, to, want.Name); rerr != nil {
			return Link{}, errors.Join(err, rerr)
		}
		return Link{}, err
	}
	got := Link{Name: want.Name, Index: l.Index, MTU: l.MTU, MAC: l.MAC, Up: want.Up}
	if want.MTU > 0 {
		got.MTU = want.MTU
	}
	if len(want.MAC) > 0 {
		got.MAC = want.MAC.String()
	}
	return got, nil
}

// undoPartialMove finds a device that a failed Move left in the target
// namespace (under its old or its new name) and sends it back.
func (d Netdevs) undoPartialMove(from netns.NsHandle, orig Link, to netns.NsHandle, newName string) error {
	if _, err := d.Get(from, orig.Name); err == nil {
		return nil // still home, nothing happened
	}
	var found *Link
	for _, n := range []string{orig.Name, newName} {
		if l, err := d.Get(to, n); err == nil && l.MAC == orig.MAC {
			found = &l
			break
		}
	}
	if found == nil {
		return fmt.Errorf("netdev %q left its netns and was not found in the target netns", orig.Name)
	}
	mac, _ := net.ParseMAC(orig.MAC)
	if err := setLink(to, found.Index, from, LinkConfig{Name: orig.Name, MTU: orig.MTU, MAC: mac, Up: orig.Up}); err != nil {
		return fmt.Errorf("return netdev %q after a failed move: %w", orig.Name, err)
	}
	return nil
}

// Set renames the netdev and sets its MTU, MAC and up state in place.
func (d Netdevs) Set(ns netns.NsHandle, name string, want LinkConfig) (Link, error) {
	l, err := d.Get(ns, name)
	if err != nil {
		return Link{}, err
	}
	if want.Name == "" {
		want.Name = name
	}
	if want.Name != name && l.Up {
		// The kernel refuses to rename a device that is up.
		if err := setLink(ns, l.Index, netns.None(), LinkConfig{Up: false}); err != nil {
			return Link{}, fmt.Errorf("set netdev %q down: %w", name, err)
		}
	}
	if err := setLink(ns, l.Index, netns.None(), want); err != nil {
		err = fmt.Errorf("set netdev %q: %w", name, err)
		if want.Name != name && l.Up {
			if uerr := setLink(ns, l.Index, netns.None(), LinkConfig{Up: true}); uerr != nil {
				err = errors.Join(err, fmt.Errorf("set netdev %q back up: %w", name, uerr))
			}
		}
		return Link{}, err
	}
	return d.Get(ns, want.Name)
}

// setLink sends one RTM_SETLINK for ifindex in ns: to the namespace to (when
// open), with want's name, MTU, MAC and up state.
func setLink(ns netns.NsHandle, index int, to netns.NsHandle, want LinkConfig) error {
	sock, err := socketAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink socket in netns %s: %w", ns, err)
	}
	defer sock.Close()
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: sock}}
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	msg.Change = unix.IFF_UP
	if want.Up {
		msg.Flags = unix.IFF_UP
	}
	req.AddData(msg)
	if to.IsOpen() {
		b := make([]byte, 4)
		nl.NativeEndian().PutUint32(b, uint32(to))
		req.AddData(nl.NewRtAttr(unix.IFLA_NET_NS_FD, b))
	}
	if want.Name != "" {
		req.AddData(nl.NewRtAttr(unix.IFLA_IFNAME, nl.ZeroTerminated(want.Name)))
	}
	if want.MTU > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(uint32(want.MTU))))
	}
	if len(want.MAC) > 0 {
		req.AddData(nl.NewRtAttr(unix.IFLA_ADDRESS, []byte(want.MAC)))
	}
	_, err = req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
