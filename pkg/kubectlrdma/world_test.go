package kubectlrdma

import (
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

const (
	ibRes  = "rdma.kube-rdma.io/ib"
	gpuRes = GPUResource
)

// newWorld is the cluster every golden test reads: an HGX node with a port
// down and two training pods, a two-GPU node with a pool the kubelet does
// not advertise, a soft-RoCE node with a stale state, a node without a
// daemon, pods pending, unallocated and without RDMA, and pods of DRA
// claims (one claim shared by two pods) on the two-GPU node.
func newWorld(t *testing.T) *world {
	hgx := stateOfScan("hgx-1", scan(t, nodesim.HGX()), "exclusive", 40*time.Second)
	hgx.Status.Devices[3].Healthy = false
	hgx.Status.Devices[3].Ports[0].State, hgx.Status.Devices[3].Ports[0].PhysState = "DOWN", "Disabled"
	hgx.Status.Pools = append(hgx.Status.Pools,
		pool("ib", "exclusive", 0, "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"),
		pool("roce", "exclusive", 0, "mlx5_8", "mlx5_9"))
	dev := func(i int) string { return hgx.Status.Devices[i].PCIAddress }
	uuid := func(i int) string { return hgx.Status.GPUs[i].UUID }
	hgx.Status.Allocations = append(hgx.Status.Allocations,
		alloc("train", "worker-0", ibRes, []string{dev(0), dev(1)}, []string{"mlx5_0", "mlx5_1"}, nil),
		alloc("train", "worker-0", gpuRes, []string{uuid(0), uuid(1)}, nil, nil),
		alloc("train", "worker-2", ibRes, []string{dev(2), dev(4)}, []string{"mlx5_2", "mlx5_4"}, nil),
		alloc("train", "worker-2", gpuRes, []string{uuid(6), uuid(7)}, nil, nil))
	finish(&hgx)

	local := stateOfScan("gpu-a", scan(t, nodesim.LocalNode(2)), "exclusive", 30*time.Second)
	local.Status.DaemonVersion = "v0.3.1"
	local.Status.Pools = append(local.Status.Pools, pool("ib", "exclusive", 0, "mlx5_0", "mlx5_1"),
		pool("roce-vf", "exclusive", 0, "mlx5_3", "mlx5_4"))
	w1 := alloc("train", "worker-1", ibRes, []string{local.Status.Devices[1].PCIAddress}, []string{"mlx5_1"}, local.Status.Devices[1].Netdevs)
	// The CNI plugin moved mlx5_1's netdev into the pod as net1.
	w1.Attached = []v1alpha1.AttachedDevice{{RDMADevice: "mlx5_1", Netdev: local.Status.Devices[1].Netdevs[0], PodNetdev: "net1", Network: "ib-net"}}
	vf := alloc("train", "vf-0", "rdma.kube-rdma.io/roce-vf", []string{local.Status.Devices[3].PCIAddress}, []string{"mlx5_3"}, local.Status.Devices[3].Netdevs)
	vf.Attached = []v1alpha1.AttachedDevice{{RDMADevice: "mlx5_3", Netdev: local.Status.Devices[3].Netdevs[0], PodNetdev: "net1", Network: "roce-net"}}
	local.Status.Allocations = append(local.Status.Allocations, w1, vf)
	local.Status.CNI = &v1alpha1.CNIStatus{Mode: "chained", Attachments: 2}
	// DRA claims on mlx5_2, a device of no device plugin pool: one claim
	// shared by two pods, one of another pod, and a monitoring claim with
	// admin access that holds nothing. Capacity is set by hand as a shared
	// dra pool with consumable capacity would publish it (the publisher
	// fills Used only so far).
	roce := local.Status.Devices[2]
	claimDev := func(req string) v1alpha1.ClaimDevice {
		return v1alpha1.ClaimDevice{Request: req, Pool: "gpu-a/roce-dra", Device: "pci-0000-1c-00-0", RDMADevice: roce.Name}
	}
	mon := claimDev("mon")
	mon.AdminAccess = true
	local.Status.Claims = []v1alpha1.Claim{
		{Namespace: "monitoring", Name: "nic-watch", UID: "claim-uid-3", Pods: []v1alpha1.ClaimPod{{UID: "pod-uid-mon"}}, Devices: []v1alpha1.ClaimDevice{mon}},
		{Namespace: "train", Name: "roce-a", UID: "claim-uid-1", Pods: []v1alpha1.ClaimPod{{UID: "pod-uid-dra-0", Name: "dra-0"}, {UID: "pod-uid-dra-1"}},
			Devices: []v1alpha1.ClaimDevice{claimDev("nic")}},
		{Namespace: "train", Name: "roce-b", UID: "claim-uid-2", Pods: []v1alpha1.ClaimPod{{UID: "pod-uid-dra-2"}, {UID: "pod-uid-gone"}},
			Devices: []v1alpha1.ClaimDevice{claimDev("nic")}},
	}
	local.Status.Devices[2].Shares = &v1alpha1.Shares{Used: 2, Capacity: 4}
	finish(&local)

	soft := stateOfScan("soft-1", scan(t, nodesim.SoftRoCE()), "shared", 2*time.Hour)
	soft.Status.DaemonVersion = "v0.2.0"
	soft.Status.Pools = append(soft.Status.Pools, pool("rxe", "shared", 4, "rxe0"))
	soft.Status.ConfigErrors = []string{`pool "ib": selector matches no RDMA device`}
	soft.Status.CNI = &v1alpha1.CNIStatus{Mode: "not-installed"}
	soft.Status.Allocations = append(soft.Status.Allocations,
		alloc("default", "rxe-client", "rdma.kube-rdma.io/rxe", []string{"rxe0-slot-1"}, []string{"rxe0"}, nil))
	finish(&soft)
	soft.Status.Summary.Table = nil // v0.2.0 predates it: nodes gets the object

	return &world{
		states: []v1alpha1.RDMANodeState{hgx, local, soft},
		nodes: []corev1.Node{
			node("hgx-1", map[string]int64{ibRes: 7, "rdma.kube-rdma.io/roce": 2, gpuRes: 8}),
			node("gpu-a", map[string]int64{ibRes: 2}),
			node("soft-1", map[string]int64{"rdma.kube-rdma.io/rxe": 4}),
			node("cpu-1", nil),
		},
		pods: []corev1.Pod{
			// The kubelet's device health (ResourceHealthStatus): one of worker-0's NICs
			// Unhealthy; worker-2's NICs Healthy and a GPU Unhealthy, which is not kube-rdma's.
			// No message: the field is new in 1.36 and TestAgainstAPIServer's 1.34 server
			// drops it (TestPodHealth and the hostile world carry one).
			withHealth(pod("train", "worker-0", "hgx-1", corev1.PodRunning, map[string]int64{ibRes: 2, gpuRes: 2}),
				health(ibRes, dev(0), "Healthy", ""), health(ibRes, dev(1), "Unhealthy", ""), health(gpuRes, uuid(0), "Healthy", "")),
			pod("train", "worker-1", "gpu-a", corev1.PodRunning, map[string]int64{ibRes: 1}),
			pod("train", "vf-0", "gpu-a", corev1.PodRunning, map[string]int64{"rdma.kube-rdma.io/roce-vf": 1}),
			withHealth(pod("train", "worker-2", "hgx-1", corev1.PodRunning, map[string]int64{ibRes: 2, gpuRes: 2}),
				health(ibRes, dev(2), "Healthy", ""), health(ibRes, dev(4), "Healthy", ""), health(gpuRes, uuid(6), "Unhealthy", "")),
			pod("train", "pending-0", "", corev1.PodPending, map[string]int64{ibRes: 1}),
			pod("default", "rxe-client", "soft-1", corev1.PodRunning, map[string]int64{"rdma.kube-rdma.io/rxe": 1}),
			pod("default", "web", "cpu-1", corev1.PodRunning, nil),
			pod("default", "lost", "gpu-a", corev1.PodRunning, map[string]int64{"rdma.kube-rdma.io/roce-vf": 1}),
			// A claim's device Healthy; another driver's device of the pod Unhealthy (left out).
			withHealth(withClaims(withUID(pod("train", "dra-0", "gpu-a", corev1.PodRunning, nil), "pod-uid-dra-0"),
				map[string]string{"nic": "roce-a", "gpu": "gpu-a-0"}, map[string]string{"nic": "nic", "gpu": ""}),
				health("claim:nic/nic", "rdma.kube-rdma.io/gpu-a/roce-dra/pci-0000-1c-00-0", "Healthy", ""),
				health("claim:gpu", "gpu.example.com/gpu-a/gpus/gpu-0", "Unhealthy", "")),
			withUID(pod("train", "dra-1", "gpu-a", corev1.PodRunning, nil), "pod-uid-dra-1"),
			withUID(pod("train", "dra-2", "gpu-a", corev1.PodRunning, nil), "pod-uid-dra-2"),
			// Its UID is in no claim: a pod with a claim of another driver.
			withUID(pod("train", "other-claim", "gpu-a", corev1.PodRunning, nil), "pod-uid-other"),
		},
	}
}

// health is the kubelet's health of one device of the resource (or claim:NAME[/REQUEST]).
func health(resource, id, h, msg string) corev1.ResourceStatus {
	r := corev1.ResourceHealth{ResourceID: corev1.ResourceID(id), Health: corev1.ResourceHealthStatus(h)}
	if msg != "" {
		r.Message = &msg
	}
	return corev1.ResourceStatus{Name: corev1.ResourceName(resource), Resources: []corev1.ResourceHealth{r}}
}

// withHealth gives p's container "main" the kubelet's allocatedResourcesStatus, merging
// statuses of the same resource as the kubelet lists them (one entry per resource).
func withHealth(p corev1.Pod, rs ...corev1.ResourceStatus) corev1.Pod {
	var merged []corev1.ResourceStatus
	for _, r := range rs {
		if i := slices.IndexFunc(merged, func(m corev1.ResourceStatus) bool { return m.Name == r.Name }); i >= 0 {
			merged[i].Resources = append(merged[i].Resources, r.Resources...)
			continue
		}
		merged = append(merged, r)
	}
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "main", AllocatedResourcesStatus: merged})
	return p
}

// withClaims gives p the ResourceClaims claims (its name in the pod -> the ResourceClaim's)
// and its container "main" the requests (claim -> request, "" for all of it): the API server
// checks the claim names of the pod's device health against them.
func withClaims(p corev1.Pod, claims, requests map[string]string) corev1.Pod {
	for _, name := range slices.Sorted(maps.Keys(claims)) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claims[name])})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims,
			corev1.ResourceClaim{Name: name, Request: requests[name]})
	}
	return p
}

// withUID sets p's UID: DRA claims in a state name their pods by UID.
func withUID(p corev1.Pod, uid string) corev1.Pod {
	p.UID = types.UID(uid)
	return p
}
