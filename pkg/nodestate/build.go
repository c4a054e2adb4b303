package nodestate

import (
	"cmp"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/internal/natsort"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// Input is everything one status is built from.
type Input struct {
	View agent.View
	// Containers are the kubelet's allocations (PodResources List), of
	// every resource: Build keeps those of the view's pools.
	Containers []podresources.ContainerDevices
	// Attachments are the CNI plugin's records (attachment.Store.Records): the
	// names the pods' devices have in the pods.
	Attachments []attachment.Attachment
	// CNIMode is the chart's CNI mode (--cni-mode); "" leaves status.cni out.
	CNIMode string
	// CNIChainedPool is the chained entry's pool (--cni-chained-pool).
	CNIChainedPool string
	// PodsWithoutNetdevs are the detector's findings (pkg/netdevwatch):
	// published sorted, at most MaxPodsWithoutNetdevs.
	PodsWithoutNetdevs []v1alpha1.PodWithoutNetdevs
	// Claims are the DRA front end's claim records (claimrecord.ReadAll):
	// status.claims and the devices' shares.
	Claims []claimrecord.Record
	// GiveUps are the NICs the CNI plugin gave up on lately, newest first
	// (cnimetrics.Collector.GiveUps): status.givenUp.
	GiveUps       []cniops.GiveUp
	DaemonVersion string
	Now           time.Time
}

// MaxPodsWithoutNetdevs is the schema's bound of status.podsWithoutNetdevs.
const MaxPodsWithoutNetdevs = 1024

// Build returns the status for in. It is pure: same input, same status.
func Build(in Input) v1alpha1.RDMANodeStateStatus {
	st := v1alpha1.RDMANodeStateStatus{
		StateVersion:  v1alpha1.StateVersion,
		DaemonVersion: in.DaemonVersion,
		RDMANetnsMode: string(in.View.NetnsMode),
		LastUpdate:    metav1.NewTime(in.Now.UTC().Truncate(time.Second)),
		ConfigErrors:  slices.Clone(in.View.ConfigErrors),
	}
	var node discovery.Node
	var healthy map[string]bool
	if s := in.View.Snapshot; s != nil && s.Node != nil {
		node, healthy = *s.Node, s.Healthy
	}
	devs := slices.Clone(node.RDMADevices)
	slices.SortFunc(devs, func(a, b discovery.RDMADevice) int { return natsort.Compare(a.Name, b.Name) })
	for _, d := range devs {
		st.Devices = append(st.Devices, device(d, healthy[d.Name], in.View.Pools))
		if !healthy[d.Name] {
			st.Summary.Unhealthy++
		}
	}
	gpus := slices.Clone(node.GPUs)
	slices.SortFunc(gpus, func(a, b discovery.GPU) int { return strings.Compare(a.PCIAddress, b.PCIAddress) })
	for _, g := range gpus {
		st.GPUs = append(st.GPUs, v1alpha1.GPU{PCIAddress: g.PCIAddress, UUID: g.UUID, Minor: clonePtr(g.Minor),
			NUMANode: g.NUMANode, PCIeRoot: g.PCIeRoot})
		row := v1alpha1.AffinityRow{GPU: g.PCIAddress, Levels: make([]string, 0, len(devs))}
		for _, d := range devs {
			row.Levels = append(row.Levels, string(discovery.Distance(g.Location(), d.Location(), in.View.NUMANodes)))
		}
		st.Affinity = append(st.Affinity, row)
	}
	st.Allocations = allocations(in.Containers, in.View.Pools, devs, in.Attachments)
	if in.CNIMode != "" {
		st.CNI = &v1alpha1.CNIStatus{Mode: in.CNIMode, ChainedPool: in.CNIChainedPool}
		for _, a := range in.Attachments {
			if a.Complete {
				st.CNI.Attachments++
			}
		}
	}
	var shares map[string]int
	st.Claims, shares = claims(in.Claims, devs, in.Attachments)
	// A shared dra pool publishes each member for Slots claims at once.
	capacity := map[string]int{}
	for _, p := range in.View.DRAPools {
		for _, m := range p.Members {
			if p.Mode == config.Shared && p.Slots > 0 {
				capacity[m] = p.Slots
			}
		}
	}
	for i := range st.Devices {
		n, c := shares[st.Devices[i].Name], capacity[st.Devices[i].Name]
		if n > 0 || c > 0 {
			st.Devices[i].Shares = &v1alpha1.Shares{Used: n, Capacity: c}
		}
	}
	st.Pools = pools(in.View.Pools, st.Allocations)
	st.PodsWithoutNetdevs = podsWithoutNetdevs(in.PodsWithoutNetdevs)
	st.GivenUp = givenUp(in.GiveUps)
	pods := map[[2]string]bool{}
	for _, a := range st.Allocations {
		pods[[2]string{a.Namespace, a.Pod}] = true
	}
	st.Summary.Devices, st.Summary.GPUs, st.Summary.Pods = len(st.Devices), len(st.GPUs), len(pods)
	st.Summary.Claims = len(st.Claims)
	st.Summary.Table = v1alpha1.NewSummaryTable(&st)
	return st
}

func device(d discovery.RDMADevice, healthy bool, pools []agent.PoolView) v1alpha1.Device {
	out := v1alpha1.Device{Name: d.Name, Kind: string(d.Kind), PCIAddress: d.PCIAddress, NUMANode: d.NUMANode,
		PCIeRoot: d.PCIeRoot, LinkLayer: d.LinkLayer, Netdevs: slices.Clone(d.Netdevs), Healthy: healthy}
	for _, p := range pools {
		if slices.Contains(p.Members, d.Name) {
			out.Pools = append(out.Pools, p.Name)
		}
	}
	for _, p := range d.Ports {
		port := v1alpha1.Port{Port: p.Port, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer,
			Rate: p.Rate, Netdev: p.Netdev}
		if i, ok := discovery.RoCEv2GIDIndex(p); ok && p.LinkLayer == "Ethernet" {
			port.RoCEv2GIDIndex = &i
		}
		out.Ports = append(out.Ports, port)
	}
	return out
}

// allocations keeps the containers' devices of the pools' resources and
// names the RDMA devices and netdevs behind each device ID.
func allocations(ctrs []podresources.ContainerDevices, pools []agent.PoolView, devs []discovery.RDMADevice, recs []attachment.Attachment) []v1alpha1.Allocation {
	byResource := map[string]agent.PoolView{}
	for _, p := range pools {
		byResource[p.Resource] = p
	}
	netdevs := map[string][]string{}
	for _, d := range devs {
		netdevs[d.Name] = d.Netdevs
	}
	var out []v1alpha1.Allocation
	for _, c := range ctrs {
		p, ok := byResource[c.Resource]
		if !ok || len(c.DeviceIDs) == 0 {
			continue
		}
		a := v1alpha1.Allocation{Namespace: c.Namespace, Pod: c.Pod, Container: c.Container, Resource: c.Resource,
			DeviceIDs: slices.Sorted(slices.Values(c.DeviceIDs))}
		a.DeviceIDs = slices.Compact(a.DeviceIDs)
		names := boundDevices(recs, a.Namespace, a.Pod, p)
		if names == nil {
			for _, id := range a.DeviceIDs {
				for _, name := range p.ByID[id] {
					if !slices.Contains(names, name) {
						names = append(names, name)
					}
				}
			}
		}
		for _, name := range names {
			a.RDMADevices = append(a.RDMADevices, name)
			a.Netdevs = append(a.Netdevs, netdevs[name]...)
		}
		a.Attached = attached(recs, a.Namespace, a.Pod, a.RDMADevices)
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b v1alpha1.Allocation) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod),
			strings.Compare(a.Container, b.Container), strings.Compare(a.Resource, b.Resource))
	})
	return out
}

// boundDevices are, for a gpuAligned pool, the devices the CNI plugin bound
// to pod ns/name (its complete records' binding of the pool): the kubelet's
// device IDs there are slots, each standing for every member. nil for
// another pool, or before the plugin bound any (the slots' members then).
func boundDevices(recs []attachment.Attachment, ns, name string, p agent.PoolView) []string {
	if p.Binding != config.GPUAligned {
		return nil
	}
	var out []string
	for _, r := range recs {
		if !r.Complete || r.Pod == nil || r.Pod.Namespace != ns || r.Pod.Name != name || r.Binding == nil || r.Binding.Pool != p.Name {
			continue
		}
		for _, d := range r.Devices {
			if !slices.Contains(out, d.RDMA) {
				out = append(out, d.RDMA)
			}
		}
	}
	natsort.Sort(out)
	return out
}

// attached is what the complete attachment records of pod ns/name say about
// the devices names, sorted by device. Two complete records naming one
// device should not exist (a record is the device's claim), but a record
// outlives its sandbox until DEL or GC: should two name it for the pod, the
// greater container ID wins, so that the result does not depend on the
// order the records were read in.
func attached(recs []attachment.Attachment, ns, name string, names []string) []v1alpha1.AttachedDevice {
	by := map[string]v1alpha1.AttachedDevice{}
	from := map[string]string{}
	for _, r := range recs {
		if !r.Complete || r.Pod == nil || r.Pod.Namespace != ns || r.Pod.Name != name {
			continue
		}
		for _, d := range r.Devices {
			if !slices.Contains(names, d.RDMA) || from[d.RDMA] > r.ContainerID {
				continue
			}
			from[d.RDMA] = r.ContainerID
			by[d.RDMA] = v1alpha1.AttachedDevice{RDMADevice: d.RDMA, PodRDMADevice: d.PodRDMA, Netdev: d.Host.Name,
				PodNetdev: d.PodIfName, Network: r.Network}
		}
	}
	var out []v1alpha1.AttachedDevice
	keys := slices.Collect(maps.Keys(by))
	natsort.Sort(keys)
	for _, n := range keys {
		out = append(out, by[n])
	}
	return out
}

// pools counts, per pool, the distinct advertised device IDs allocated.
func pools(views []agent.PoolView, allocs []v1alpha1.Allocation) []v1alpha1.Pool {
	var out []v1alpha1.Pool
	for _, p := range views {
		used := map[string]bool{}
		for _, a := range allocs {
			if a.Resource != p.Resource {
				continue
			}
			for _, id := range a.DeviceIDs {
				used[id] = true
			}
		}
		out = append(out, v1alpha1.Pool{Name: p.Name, Resource: p.Resource, Mode: string(p.Mode), Slots: p.Slots, NoNCCL: p.NoNCCL,
			Capacity: p.Capacity, Allocatable: p.Allocatable, Allocated: len(used), Devices: slices.Clone(p.Members)})
	}
	return out
}

// podsWithoutNetdevs sorts a copy by namespace, pod and pool, and keeps the
// schema's bound.
func podsWithoutNetdevs(in []v1alpha1.PodWithoutNetdevs) []v1alpha1.PodWithoutNetdevs {
	if len(in) == 0 {
		return nil
	}
	out := make([]v1alpha1.PodWithoutNetdevs, 0, len(in))
	for _, p := range in {
		out = append(out, *p.DeepCopy())
	}
	slices.SortFunc(out, func(a, b v1alpha1.PodWithoutNetdevs) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod), strings.Compare(a.Pool, b.Pool))
	})
	return out[:min(len(out), MaxPodsWithoutNetdevs)]
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// sameContent reports whether two statuses differ only in LastUpdate.
func sameContent(a, b *v1alpha1.RDMANodeStateStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	x, y := *a, *b
	x.LastUpdate, y.LastUpdate = metav1.Time{}, metav1.Time{}
	return reflect.DeepEqual(x, y)
}
