package kubectlrdma

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// resourcePrefix is the group of kube-rdma's extended resources.
var resourcePrefix = v1alpha1.GroupVersion.Group + "/"

// podResources are the kube-rdma resources pod's containers ask for, sorted.
func podResources(pod *corev1.Pod) []string {
	var res []string
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for name := range c.Resources.Limits {
			if n := string(name); strings.HasPrefix(n, resourcePrefix) && !slices.Contains(res, n) {
				res = append(res, n)
			}
		}
	}
	slices.Sort(res)
	return res
}

// podAllocation joins a pod with its node's state; ok is false for a pod
// that asks for no kube-rdma resource and that no DRA claim in its node's
// state was prepared for.
func podAllocation(pod *corev1.Pod, byNode map[string]*v1alpha1.RDMANodeState) (PodAllocation, bool) {
	a := PodAllocation{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Resources: podResources(pod)}
	a.Health, a.DeviceHealth = podHealth(pod, a.Resources)
	s := byNode[a.Node]
	var claimed []NIC
	if s != nil {
		claimed, a.Claims = claimNICs(s, pod.Namespace, string(pod.UID))
	}
	if len(a.Resources) == 0 && len(a.Claims) == 0 {
		return a, false
	}
	if a.Resources == nil {
		a.Resources = []string{} // a claim's pod: none, not null in json
	}
	switch {
	case a.Node == "":
		a.Status = "not scheduled"
		return a, true
	case s == nil:
		a.Status = "no kube-rdma daemon on node"
		return a, true
	}
	a.NICs, a.GPUs = allocated(pod, s)
	a.NICs = append(a.NICs, claimed...)
	switch {
	case len(a.NICs) == 0:
		a.Status = "not allocated"
	case len(a.GPUs) > 0:
		a.WorstLevel = string(worstLevel(s, a.NICs, a.GPUs))
		a.Status = "allocated"
	default:
		a.Status = "allocated"
	}
	return a, true
}

// allocated are the NICs and GPUs the state's allocations give pod.
func allocated(pod *corev1.Pod, s *v1alpha1.RDMANodeState) ([]NIC, []PodGPU) {
	var nics []NIC
	var gpus []PodGPU
	for _, al := range s.Status.Allocations {
		if al.Namespace != pod.Namespace || al.Pod != pod.Name {
			continue
		}
		if al.Resource == GPUResource {
			for _, id := range al.DeviceIDs {
				if i := gpuIndex(s, id); i >= 0 && !slices.ContainsFunc(gpus, func(g PodGPU) bool { return g.Index == i }) {
					g := s.Status.GPUs[i]
					gpus = append(gpus, PodGPU{Index: i, PCIAddress: g.PCIAddress, UUID: g.UUID})
				}
			}
			continue
		}
		for i, name := range al.RDMADevices {
			nic := NIC{Name: name, Resource: al.Resource, NUMANode: -1}
			if d := device(s, name); d != nil {
				nic.PCIAddress, nic.NUMANode = d.PCIAddress, d.NUMANode
				if len(d.Netdevs) > 0 {
					nic.Netdev = d.Netdevs[0]
				}
			}
			if i < len(al.Netdevs) && al.Netdevs[i] != "" {
				nic.Netdev = al.Netdevs[i]
			}
			for _, at := range al.Attached {
				if at.RDMADevice == name {
					nic.PodNetdev, nic.PodName = at.PodNetdev, at.PodRDMADevice
				}
			}
			nics = append(nics, nic)
		}
	}
	slices.SortFunc(gpus, func(a, b PodGPU) int { return a.Index - b.Index })
	return nics, gpus
}

// gpuIndex finds a GPU by UUID or PCI address (the GPU device plugin's
// device IDs are either); -1 when the state has no such GPU.
func gpuIndex(s *v1alpha1.RDMANodeState, id string) int {
	return slices.IndexFunc(s.Status.GPUs, func(g v1alpha1.GPU) bool {
		return g.UUID == id || strings.EqualFold(g.PCIAddress, id)
	})
}

func device(s *v1alpha1.RDMANodeState, name string) *v1alpha1.Device {
	i := slices.IndexFunc(s.Status.Devices, func(d v1alpha1.Device) bool { return d.Name == name })
	if i < 0 {
		return nil
	}
	return &s.Status.Devices[i]
}

// worstLevel is the farthest level between any of gpus and any of nics in
// the state's affinity matrix; "?" when a pair is missing.
func worstLevel(s *v1alpha1.RDMANodeState, nics []NIC, gpus []PodGPU) discovery.Level {
	worst := discovery.PIX
	for _, g := range gpus {
		ri := slices.IndexFunc(s.Status.Affinity, func(r v1alpha1.AffinityRow) bool { return r.GPU == g.PCIAddress })
		for _, n := range nics {
			di := slices.IndexFunc(s.Status.Devices, func(d v1alpha1.Device) bool { return d.Name == n.Name })
			if ri < 0 || di < 0 || di >= len(s.Status.Affinity[ri].Levels) {
				return "?"
			}
			if l := discovery.Level(s.Status.Affinity[ri].Levels[di]); l.Rank() > worst.Rank() {
				worst = l
			}
		}
	}
	return worst
}
