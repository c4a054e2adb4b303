package agent

import (
	"context"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// FrontEnd serves the pools whose frontend it is (config.Pool.Frontend) to
// the kubelet: the device plugin API (pkg/deviceplugin) or DRA (pkg/dra).
// The agent drives it: assignments and health go in, only errors and
// status come back. Start, Update and Stop are called on the agent's Run
// goroutine; Status also from it, after each Update.
type FrontEnd interface {
	// Start is called once by Run, after the node's first scan and before
	// the first Update; ctx ends when Run returns. An error ends Run.
	Start(ctx context.Context, node Node) error
	// Update hands the front end its configured pools with their members
	// and the node's device health, with every snapshot the agent handles
	// (hot-plug, port state, GID and netdev changes, config reloads). It
	// replaces what the last Update handed over: a pool no longer named is
	// no longer served. An error is logged; the next Update tries again.
	Update(u Update) error
	// Status is what the front end advertises to the kubelet, pool by pool
	// in name order, for /state, /metrics and the agent's View. A front
	// end whose devices reach the kubelet another way (DRA's
	// ResourceSlices) returns nil: the agent reports its pools' members
	// and their health itself.
	Status() []PoolStatus
	// Stop stops serving. Run calls it once on its way out, also for a
	// front end it did not start.
	Stop()
}

// PoolRefuser is a front end that may refuse a pool of its own on what it
// learns after Start (the DRA front end: an API server without the
// feature gate a shared pool needs). The agent asks Refusal of every pool
// of the front end with its own refusals (Assignment.Refused, the problem
// on /state), and hands every front end its pools again when the channel
// of Refusals is closed (a new one is taken then).
type PoolRefuser interface {
	// Refusal says why the front end does not serve the pool, "" when it does.
	Refusal(p config.Pool) string
	// Refusals is closed when Refusal's answers may have changed.
	Refusals() <-chan struct{}
}

// FileKeeper is a front end that writes files another process reads and
// may move aside when they do not decode (the device plugin's pool.json of
// gpuAligned pools, read by the CNI plugin: internal/quarantine). The agent
// calls RestoreFiles every FilesInterval on its Run goroutine: a file of
// its own that is missing is written again.
type FileKeeper interface {
	RestoreFiles()
}

// Node is what a front end learns of the node at Start.
type Node struct {
	// NUMANodes is the node's NUMA node count (for discovery.Distance).
	NUMANodes int
}

// Update is what the agent hands a front end with each snapshot.
type Update struct {
	// Pools are the front end's configured pools, in configuration order.
	Pools []Assignment
	// MembersChanged is false when only health may have changed since the
	// last Update: pools and members are the last Update's.
	MembersChanged bool
	// Healthy is the node's device health by RDMA device name.
	Healthy map[string]bool
	// GPUs are the node's GPUs (the last scan's).
	GPUs []discovery.GPU
}

// Assignment is one configured pool as the agent hands it to its front end.
type Assignment struct {
	Pool config.Pool
	// Resource is the pool's resource name (config.Config.ResourceName).
	Resource string
	// Refused says why the agent does not serve the pool on this node (the
	// problem is on /state); "" when it does. A front end serves nothing
	// of a refused pool and removes what an earlier run left of it.
	Refused string
	// Members are the pool's RDMA devices; none for a refused pool.
	Members []discovery.RDMADevice
}

// PoolStatus is what a front end advertises for one pool.
type PoolStatus struct {
	Name string
	// Devices are the advertised devices, in the front end's order.
	Devices []DeviceStatus
	// CDIDevices are the fully qualified CDI device names the pool's
	// containers get ("rdma.kube-rdma.io/hca=0000:18:00.0"); none when CDI
	// is off or for a gpuAligned pool.
	CDIDevices []string
}

// DeviceStatus is one advertised device: a kubelet device ID and the RDMA
// devices a container gets for it.
type DeviceStatus struct {
	ID          string
	Healthy     bool
	RDMADevices []string
	NUMANodes   []int64
}

// frontendOf is the front end of a pool: "" is the device plugin.
func frontendOf(p config.Pool) config.Frontend {
	if p.Frontend == "" {
		return config.DevicePlugin
	}
	return p.Frontend
}
