package agent

import (
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
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
