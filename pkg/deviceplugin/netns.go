package deviceplugin

import (
	"context"
	"fmt"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// NetnsModeReader reports the RDMA subsystem's netns mode.
type NetnsModeReader interface {
	NetnsMode() (rdma.NetnsMode, error)
}

// NetlinkNetnsMode asks the kernel over RDMA netlink, in the daemon's own
// network namespace.
type NetlinkNetnsMode struct{}

// NetnsMode returns rdma.NetnsShared or rdma.NetnsExclusive.
// On error the mode is rdma.NetnsUnknown.
func (NetlinkNetnsMode) NetnsMode() (rdma.NetnsMode, error) {
	m, err := rdma.Devices{}.NetnsMode(netns.None())
	if err != nil {
		return rdma.NetnsUnknown, err
	}
	return m, nil
}

// EventSource pokes the daemon when something may have changed on the node,
// so it re-reads sysfs at once instead of at the next tick.
type EventSource interface {
	// Run calls poke on each event until ctx ends.
	Run(ctx context.Context, poke func()) error
}

// NetlinkLinks pokes on every rtnetlink link update (a netdev going down or
// away, a VF count change).
type NetlinkLinks struct {
	// Namespace to follow; nil is the daemon's own network namespace.
	Namespace *netns.NsHandle
}

// Run subscribes to link updates.
func (l NetlinkLinks) Run(ctx context.Context, poke func()) error {
	ch := make(chan netlink.LinkUpdate, 64)
	errc := make(chan error, 1)
	err := netlink.LinkSubscribeWithOptions(ch, ctx.Done(), netlink.LinkSubscribeOptions{
		Namespace: l.Namespace,
		ErrorCallback: func(err error) {
			select {
			case errc <- err:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("subscribe to link updates: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("link updates: %w", err)
		case _, ok := <-ch:
			if !ok {
				return nil
			}
			poke()
		}
	}
}
