package dra

import (
	"errors"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
)

// Shared pools: a device of a pool of mode shared is published for up to
// the pool's slots claims at once through DRA consumable capacity
// (KEP-5075, the DRAConsumableCapacity feature gate, alpha in 1.34). Each
// claim's allocation result carries a shareID of its own; every claim gets
// its own CDI spec and record (prepare.go), so the CNI plugin gives each
// sharer's pod its own child netdev of the NIC and the claims are
// unprepared one by one.

// CapacityShares is the consumable capacity a device of a shared pool is
// published with: its value is the pool's slots, how many claims the
// device takes at once; a claim consumes 1 of it unless it asks for more
// (capacity.requests), up to all of them.
const CapacityShares resourceapi.QualifiedName = Domain + "/shares"

// ConsumableCapacityGate is the API server's feature gate shared pools need.
const ConsumableCapacityGate = "DRAConsumableCapacity"

// PoolOptions is what Publish needs of a configured pool beside its members.
type PoolOptions struct {
	// NoNCCL: the pool does not set NCCL's variables (config nccl: false).
	NoNCCL bool
	// Memlock is the pool's RLIMIT_MEMLOCK for the memlock hook in its
	// claims' CDI specs (config memlock); 0 names no hook for the pool.
	Memlock uint64
	// Shares is how many claims a device of the pool takes at once (the
	// slots of a shared pool); 0 publishes the devices for one claim each.
	Shares int
}

// Share publishes the devices for up to shares claims at once:
// allowMultipleAllocations and the capacity CapacityShares of value
// shares, which a claim consumes 1 of by default and any whole number from
// 1 to shares of when it asks. The scheduler then allocates a device to as
// many claims as their requests fit in shares. An API server without the
// DRAConsumableCapacity feature gate drops both fields, so that every
// device goes to one claim at a time; the Driver refuses the pool when it
// sees that (Refusal).
func Share(devs []Device, shares int) {
	for i := range devs {
		api := &devs[i].API
		api.AllowMultipleAllocations = ptr(true)
		if api.Capacity == nil {
			api.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{}
		}
		api.Capacity[CapacityShares] = resourceapi.DeviceCapacity{
			Value: *resource.NewQuantity(int64(shares), resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default: resource.NewQuantity(1, resource.DecimalSI),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{
					Min:  resource.NewQuantity(1, resource.DecimalSI),
					Max:  resource.NewQuantity(int64(shares), resource.DecimalSI),
					Step: resource.NewQuantity(1, resource.DecimalSI),
				},
			},
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Refusal implements agent.PoolRefuser: a shared pool is refused once a
// publication showed that the API server lacks DRAConsumableCapacity (it
// dropped allowMultipleAllocations from a published device: the
// ResourceSlice controller reads every slice it writes back and reports a
// difference, HandleError). Until then it is served. A gate is switched
// with the API server's restart, this daemon's restart learns it again.
func (d *Driver) Refusal(p config.Pool) string {
	if !p.DRA() || p.Mode != config.Shared {
		return ""
	}
	d.mu.Lock()
	off := d.noCapacity
	d.mu.Unlock()
	if off == "" {
		return ""
	}
	return fmt.Sprintf("pool %q is a shared pool of frontend dra but the API server does not have the %s feature gate "+
		"(it dropped allowMultipleAllocations from the published devices of DRA pool %s); the pool is not served: "+
		"enable %s on the kube-apiserver, kube-scheduler, kube-controller-manager and kubelet (alpha in Kubernetes 1.34), "+
		"or give the pool mode exclusive or frontend devicePlugin",
		p.Name, ConsumableCapacityGate, off, ConsumableCapacityGate)
}

// Refusals implements agent.PoolRefuser: closed when Refusal's answers
// may have changed.
func (d *Driver) Refusals() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused
}

// noteDropped records an API server without DRAConsumableCapacity, told by
// the ResourceSlice controller's dropped-fields error of DRA pool pool.
func (d *Driver) noteDropped(err error) {
	var dropped *resourceslice.DroppedFieldsError
	if !errors.As(err, &dropped) || !slices.Contains(dropped.DisabledFeatures(), ConsumableCapacityGate) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.noCapacity != "" {
		return
	}
	d.noCapacity = dropped.PoolName
	close(d.refused)
	d.refused = make(chan struct{})
	d.log.Error("the API server does not have the "+ConsumableCapacityGate+" feature gate: it dropped allowMultipleAllocations "+
		"from the published devices; the shared dra pools are refused", "draPool", dropped.PoolName)
}
