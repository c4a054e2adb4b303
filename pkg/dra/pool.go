package dra

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// DriverName is the DRA driver's name, the driver field of its
// ResourceSlices and of the allocation results it prepares.
const DriverName = claimrecord.DriverName

// PoolName is the DRA pool of a configured pool on a node:
// "<node>/<pool>". A DRA pool is the driver's, not the node's, so two nodes
// must not publish the same name; the configured name is lowered and its
// "_" becomes "-" (config validation already refuses two pools whose names
// differ only so: they would share an environment prefix).
func PoolName(node, pool string) string { return claimrecord.DRAPool(node, pool) }

// Index finds published devices by pool and name; it is the Lookup a
// Preparer uses. Build a new one for every publication.
type Index struct {
	devices map[string]map[string]Device
	noNCCL  map[string]bool
	memlock map[string]uint64
}

// SetMemlock records a pool's locked-memory limit (0: none).
func (ix *Index) SetMemlock(pool string, limit uint64) {
	if ix.memlock == nil {
		ix.memlock = map[string]uint64{}
	}
	ix.memlock[pool] = limit
}

// Memlock implements Lookup: the pool's limit, 0 when it has none.
func (ix *Index) Memlock(pool string) uint64 { return ix.memlock[pool] }

// Add records a pool's published devices.
func (ix *Index) Add(pool string, devs []Device) {
	m := make(map[string]Device, len(devs))
	for _, d := range devs {
		m[d.API.Name] = d
	}
	if ix.devices == nil {
		ix.devices = map[string]map[string]Device{}
	}
	ix.devices[pool] = m
}

// SetNoNCCL records that a pool does not set NCCL's variables (config
// nccl: false).
func (ix *Index) SetNoNCCL(pool string) {
	if ix.noNCCL == nil {
		ix.noNCCL = map[string]bool{}
	}
	ix.noNCCL[pool] = true
}

// Device implements Lookup.
func (ix *Index) Device(pool, device string) (discovery.RDMADevice, bool) {
	d, ok := ix.devices[pool][device]
	return d.RDMA, ok
}

// Attributes are the device's published attributes; nil when it is not
// published.
func (ix *Index) Attributes(pool, device string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	return ix.devices[pool][device].API.Attributes
}

// NCCL implements Lookup.
func (ix *Index) NCCL(pool string) bool { return !ix.noNCCL[pool] }
