package rdma

import (
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ErrNoRDMA is returned when the kernel has no RDMA netlink (ib_core is not
// loaded or not built).
var ErrNoRDMA = errors.New("rdma netlink not available")

// ErrDeviceNotFound is returned when no RDMA device of that name is visible in
// the namespace asked about.
var ErrDeviceNotFound = errors.New("rdma device not found")

// Devices operates on RDMA devices through RDMA netlink sockets bound to the
// namespace each call names. The zero value is ready to use.
type Devices struct{}

func rdmaHandle(ns netns.NsHandle) (*netlink.Handle, error) {
	h, err := handleAt(ns, unix.NETLINK_RDMA)
	if errors.Is(err, unix.EPROTONOSUPPORT) {
		return nil, fmt.Errorf("open rdma netlink socket: %w: %w", ErrNoRDMA, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open rdma netlink socket in netns %s: %w", ns, err)
	}
	return h, nil
}

// NetnsMode returns NetnsShared or NetnsExclusive.
func (Devices) NetnsMode(ns netns.NsHandle) (NetnsMode, error) {
	h, err := rdmaHandle(ns)
	if err != nil {
		return "", err
	}
	defer h.Close()
	m, err := h.RdmaSystemGetNetnsMode()
	if err != nil {
		return "", fmt.Errorf("read rdma netns mode: %w", err)
	}
	return ParseNetnsMode(m)
}

// List returns the names of the RDMA devices visible in ns.
func (Devices) List(ns netns.NsHandle) ([]string, error) {
	h, err := rdmaHandle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ls, err := retryDump(h.RdmaLinkList)
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.Attrs.Name)
	}
	return out, nil
}

// Move moves the RDMA device name from one namespace to another; the kernel
// allows it only in exclusive mode.
func (Devices) Move(from netns.NsHandle, name string, to netns.NsHandle) error {
	h, err := rdmaHandle(from)
	if err != nil {
		return err
	}
	defer h.Close()
	return move(h, name, to)
}

// linkMover is the part of *netlink.Handle that move uses.
type linkMover interface {
	RdmaLinkList() ([]*netlink.RdmaLink, error)
	RdmaLinkSetNsFd(link *netlink.RdmaLink, fd uint32) error
}

// move finds the device in a dump and moves it. netlink's RdmaLinkByName
// also lists and searches, but answers a name it did not find and a dump
// that failed alike (an error with text only); here a device missing from
// a complete dump is ErrDeviceNotFound and a failed dump is what it is.
func move(h linkMover, name string, to netns.NsHandle) error {
	ls, err := retryDump(h.RdmaLinkList)
	if err != nil {
		return fmt.Errorf("find rdma device %q: list rdma devices: %w", name, err)
	}
	i := slices.IndexFunc(ls, func(l *netlink.RdmaLink) bool { return l.Attrs.Name == name })
	if i < 0 {
		return fmt.Errorf("find rdma device %q: %w", name, ErrDeviceNotFound)
	}
	if err := h.RdmaLinkSetNsFd(ls[i], uint32(to)); err != nil {
		return fmt.Errorf("move rdma device %q to netns %s: %w", name, to, err)
	}
	return nil
}

// AddRxe creates a soft-RoCE device called name on the netdev called netdev
// in ns (the netdev is looked up in the namespace of the socket). The
// device itself lives where the kernel puts it: in exclusive netns mode,
// kernels up to at least 7.3 register it in the initial netns whatever
// the socket's (rxe allocates its ib_device with init_net), so a caller
// that wants it beside its netdev moves it there (Move).
func (Devices) AddRxe(ns netns.NsHandle, name, netdev string) error {
	h, err := rdmaHandle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.RdmaLinkAdd(name, "rxe", netdev); err != nil {
		return fmt.Errorf("add rxe device %q on %q: %w", name, netdev, err)
	}
	return nil
}

// DelSoft deletes the software RDMA device (rxe, siw) called name, visible
// in ns (`rdma link delete`); ErrDeviceNotFound when ns does not see it.
// The kernel unregisters the device before it answers.
func (Devices) DelSoft(ns netns.NsHandle, name string) error {
	h, err := rdmaHandle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	ls, err := retryDump(h.RdmaLinkList)
	if err != nil {
		return fmt.Errorf("find rdma device %q: list rdma devices: %w", name, err)
	}
	if !slices.ContainsFunc(ls, func(l *netlink.RdmaLink) bool { return l.Attrs.Name == name }) {
		return fmt.Errorf("find rdma device %q: %w", name, ErrDeviceNotFound)
	}
	if err := h.RdmaLinkDel(name); err != nil {
		return fmt.Errorf("delete rdma device %q: %w", name, err)
	}
	return nil
}
