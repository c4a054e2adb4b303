// Package netdevcheck decides whether a pod that holds devices of a pool
// whose pods get netdevs through the CNI plugin (the chained pool, of the
// device plugin or of DRA, and every gpuAligned pool) got them: fail
// closed, loudly. A pod created while the kube-rdma entry was
// missing from the conflist (the daemon's restart window, an uninstall)
// holds the devices but attached nothing; its containers would start
// without their netdevs.
//
// It is pure: pools, holdings (a device plugin pool's from the kubelet or
// the container, a DRA pool's from the agent's claim records: dra.go) and
// the CNI plugin's attachment records in, what is missing out. No I/O, no
// clock, no logging. The NRI plugin (pkg/nri) asks it at CreateContainer;
// the daemon's detector (pkg/netdevwatch) asks it for every pod the
// kubelet lists or a claim record names.
package netdevcheck

import (
	"cmp"
	"slices"

	"github.com/kube-rdma/kube-rdma/internal/natsort"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// Why says how a pool's pods get netdevs.
type Why string

const (
	// Chained: the pool is the chained CNI entry's (--cni-chained-pool).
	Chained Why = "chained CNI"
	// GPUAligned: the CNI plugin binds the pool's NICs at sandbox creation.
	GPUAligned Why = "gpuAligned"
)

// Chain is what the node's chained kube-rdma CNI entry attaches.
type Chain struct {
	// Pool is the entry's pool (--cni-chained-pool); "" for none.
	Pool string
	// SharedNetdev: the entry's sharedNetdev is macvlan or ipvlan
	// (--cni-shared-netdev), so a pod of a shared pool gets a child netdev
	// of each NIC. false for none, the plugin's default: such a pod gets
	// device nodes only and there is no netdev to miss.
	SharedNetdev bool
}

// Pools returns the pools of the view whose pods get netdevs through the
// CNI plugin: the chained pool (unless it is shared and the entry gives
// shared pools' pods no netdev) and every gpuAligned pool.
func Pools(pools []agent.PoolView, chain Chain) map[string]Why {
	out := map[string]Why{}
	for _, p := range pools {
		switch {
		case p.Binding == config.GPUAligned:
			out[p.Name] = GPUAligned
		case p.Name == chain.Pool && (p.Mode != config.Shared || chain.SharedNetdev):
			out[p.Name] = Chained
		}
	}
	return out
}

// Pod names the pod whose attachments count. With a SandboxID (the NRI
// plugin knows the sandbox being used) only that sandbox's records count;
// without one, records of the pod's UID (or namespace and name when either
// side has no UID).
type Pod struct {
	Namespace, Name, UID, SandboxID string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Holding is what a container (or a pod) holds of one pool: the RDMA
// device names (a gpuAligned pool's: its members, or its slots).
type Holding struct {
	Pool    string
	Devices []string
}

// Missing is one netdev pool whose devices have no complete attachment of
// the pod.
type Missing struct {
	Pool string
	Why  Why
	// Devices are the held devices no complete record of the pod names
	// (for a gpuAligned pool: every held one, the pool having no binding
	// of the pod), natural order.
	Devices []string
}

// Check returns the netdev pools of held whose devices the pod's complete
// attachment records do not cover, sorted by pool. A pool of kubelet
// binding is covered when every held device is in a complete record of the
// pod and not returned; a gpuAligned pool when a complete record of the pod
// carries its binding (the plugin chose the devices). Holdings of other
// pools are ignored.
func Check(pod Pod, held []Holding, netdevPools map[string]Why, recs []attachment.Attachment) []Missing {
	byPool := map[string][]string{}
	for _, h := range held {
		if _, ok := netdevPools[h.Pool]; !ok {
			continue
		}
		byPool[h.Pool] = append(byPool[h.Pool], h.Devices...)
	}
	cov := attachment.Covered(recs, func(r attachment.Attachment) bool { return ofPod(pod, r) })
	attached, bound := cov.Devices, cov.Bindings
	var out []Missing
	for pool, devs := range byPool {
		why := netdevPools[pool]
		var miss []string
		if why == GPUAligned { // DRAChained is checked device by device, as Chained
			if !bound[pool] {
				miss = devs
			}
		} else {
			for _, d := range devs {
				if !attached[d] {
					miss = append(miss, d)
				}
			}
		}
		if len(miss) == 0 {
			continue
		}
		miss = slices.Clone(miss)
		natsort.Sort(miss)
		out = append(out, Missing{Pool: pool, Why: why, Devices: slices.Compact(miss)})
	}
	slices.SortFunc(out, func(a, b Missing) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}

func ofPod(pod Pod, r attachment.Attachment) bool {
	if pod.SandboxID != "" {
		return r.ContainerID == pod.SandboxID
	}
	if r.Pod == nil {
		return false
	}
	if pod.UID != "" && r.Pod.UID != "" {
		return pod.UID == r.Pod.UID
	}
	return r.Pod.Namespace == pod.Namespace && r.Pod.Name == pod.Name
}

// Fix is what an operator does about a pod that misses its netdevs.
const Fix = attachment.NotAttachedFix

// How says, for the message, how a pool of w gets netdevs.
func (w Why) How() string {
	if w.DRA() {
		return "its DRA claims of driver " + claimrecord.DriverName + ", chained CNI"
	}
	return string(w)
}

// Message says what is missing for the pod and what to do, in one line.
func Message(pod Pod, m Missing) string {
	return attachment.NotAttachedMessage(pod.String(), m.Devices, m.Pool, m.Why.How())
}
