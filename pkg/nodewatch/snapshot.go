// Package nodewatch owns the daemon's picture of the node: which RDMA
// devices exist (full discovery scans, hot-plug, devices whose ports appear
// late), the health of each (port state), and their GID tables and netdev
// names, kept current from a periodic tick and from events (netlink link
// and address updates, class directory changes). It publishes immutable
// snapshots that any number of consumers read (the device plugin today; a
// node-state publisher, GPU-aligned binding or a DRA driver next).
//
// Every sysfs read goes through pkg/discovery and every netlink call through
// pkg/rdma; nodewatch decides only when to read what. It knows nothing of
// pools, the kubelet or Kubernetes.
package nodewatch

import (
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Snapshot is the node at one moment. It is never modified once published:
// consumers may keep it and read it from any goroutine.
type Snapshot struct {
	// Gen increases by one with every published snapshot.
	Gen uint64
	// DevicesGen increases when the device list or a device's ports change
	// (link layer, netdev names, GID tables), not when only health does.
	DevicesGen uint64
	// Node is the last scan with re-read ports. Its Affinity is left
	// empty: consumers that need it call discovery.Distance on the
	// devices' and GPUs' locations (a thousand devices times eight GPUs
	// is memory an idle daemon does not need).
	Node *discovery.Node
	// Healthy maps each RDMA device name to its health (see
	// discovery.RDMADevice.Healthy: present and every port ACTIVE).
	Healthy map[string]bool
	// HealthSince maps each RDMA device name to when the watcher saw its
	// health take its current value (the re-read that found the change,
	// or the first scan that found the device): the daemon's own detection
	// time, which /state serves and the port-down e2e measures.
	HealthSince map[string]time.Time
}
