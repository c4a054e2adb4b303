package rdma

import "fmt"

// NetnsMode is the RDMA subsystem's network namespace mode (`rdma system
// show netns`). In shared mode every RDMA device is visible from every
// network namespace; in exclusive mode a device is visible only in the one
// it was moved to, so only exclusive mode isolates pods from each other's
// NICs. The CNI's netconf, the device plugin's config checks and the daemon's
// state all use this one type.
type NetnsMode string

// The modes. NetnsUnknown is what the daemon reports when the kernel cannot
// be asked (no RDMA netlink); the kernel itself never says it.
const (
	NetnsShared    NetnsMode = "shared"
	NetnsExclusive NetnsMode = "exclusive"
	NetnsUnknown   NetnsMode = "unknown"
)

// ParseNetnsMode accepts the kernel's two modes.
func ParseNetnsMode(s string) (NetnsMode, error) {
	switch m := NetnsMode(s); m {
	case NetnsShared, NetnsExclusive:
		return m, nil
	}
	return "", fmt.Errorf("rdma netns mode %q is not %q or %q", s, NetnsShared, NetnsExclusive)
}
