package rdma

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Link and address notifications. The device plugin's node watcher follows
// them to re-read port state and GID tables at once instead of at its next
// tick: a netdev going down or away, a VF count change, an address added or
// removed (which fills or empties RoCE GID slots).

// subscription turns a netlink subscription's channel into calls of fn until
// ctx ends; an error the subscription reports ends it.
func subscription[T any](ctx context.Context, ch <-chan T, errc <-chan error, what string, fn func(T)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if ctx.Err() != nil {
				return nil // the subscription's socket closing as ctx ended
			}
			return fmt.Errorf("%s updates: %w", what, err)
		case u, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("%s updates: subscription closed", what)
			}
			fn(u)
		}
	}
}

func nsOption(ns netns.NsHandle) *netns.NsHandle {
	if !ns.IsOpen() {
		return nil // the caller's own namespace
	}
	return &ns
}

func errCallback(errc chan error) func(error) {
	return func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
}

// WatchLinks calls fn with the link's name on every rtnetlink link update in
// ns (netns.None() for the caller's own namespace) until ctx ends. It
// returns nil when ctx ends, an error when the subscription fails.
func WatchLinks(ctx context.Context, ns netns.NsHandle, fn func(link string)) error {
	ch := make(chan netlink.LinkUpdate, 64)
	errc := make(chan error, 1)
	err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{
		Namespace: nsOption(ns), ErrorCallback: errCallback(errc),
	})
	if err != nil {
		return fmt.Errorf("subscribe to link updates in netns %s: %w", ns, err)
	}
	return subscription(ctx, ch, errc, "link", func(u netlink.LinkUpdate) {
		name := ""
		if u.Link != nil {
			name = u.Link.Attrs().Name
		}
		fn(name)
	})
}

// WatchAddrs calls fn with the link's name on every address added or
// removed in ns (netns.None() for the caller's own namespace) until ctx
// ends. The name is looked up by index. An update about a link that is gone
// is dropped: its removal (or move to another namespace) is a link update,
// which names it. fn("") says the name could not be learned for another
// reason (the lookup failed): the caller must assume any link.
//
// Before, a gone link's updates were reported as "": on a node where pods
// come and go, every pod's host-side veth taking its addresses with it made
// the node watcher re-read every device's ports and GID tables (on the
// 1,024-device node, an idle daemon beside a pod-churning e2e spent 2.8-8.9%
// of a core instead of about 0.5%).
func WatchAddrs(ctx context.Context, ns netns.NsHandle, fn func(link string)) error {
	// NETLINK_ROUTE only: without a family the handle opens one socket per
	// family netlink knows (route, xfrm, netfilter), and on a kernel built
	// without one of them (the soft-RoCE guests' 7.3 has no xfrm_user) the
	// whole watcher failed with "protocol not supported", leaving the node
	// watcher on its 500 ms re-read.
	h, err := handleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink socket in netns %s: %w", ns, err)
	}
	defer h.Close()
	ch := make(chan netlink.AddrUpdate, 64)
	errc := make(chan error, 1)
	err = netlink.AddrSubscribeWithOptions(ch, ctx.Done(), netlink.AddrSubscribeOptions{
		Namespace: nsOption(ns), ErrorCallback: errCallback(errc),
	})
	if err != nil {
		return fmt.Errorf("subscribe to address updates in netns %s: %w", ns, err)
	}
	return subscription(ctx, ch, errc, "address", func(u netlink.AddrUpdate) {
		l, err := h.LinkByIndex(u.LinkIndex)
		var gone netlink.LinkNotFoundError
		switch {
		case errors.As(err, &gone):
		case err != nil:
			fn("")
		default:
			fn(l.Attrs().Name)
		}
	})
}
