package main

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// simNode is one simulated node: the agent's view the real publisher
// (nodestate.Publisher) reads, the kubelet's allocations it lists, and the
// ResourceSlices the real device builder (dra.Devices, dra.Slices) makes.
type simNode struct {
	name string
	uid  types.UID
	topo *topo
	pods []podresources.ContainerDevices

	mu      sync.Mutex
	healthy map[string]bool
	changed chan struct{}

	// pacer calls syncSlices as dra.Driver's pacer calls its helper's
	// PublishResources: at most once per dra.DefaultPublishInterval.
	pacer *dra.Pacer
	// Owned by syncSlices (setup's first call, then the pacer's).
	slices []*resourceapi.ResourceSlice
}

func newSimNode(name string, t *topo, nsOf func(i int) string, podsPerNode int) *simNode {
	n := &simNode{name: name, topo: t, healthy: t.allHealthy(), changed: make(chan struct{})}
	if len(t.roce) > 0 {
		for i := range podsPerNode {
			n.pods = append(n.pods, podresources.ContainerDevices{Namespace: nsOf(i), Pod: podName(name, i),
				Container: "main", Resource: roceResource, DeviceIDs: []string{fmt.Sprintf("roce-%d", i%roceSlots)}})
		}
	}
	return n
}

func podName(node string, i int) string { return fmt.Sprintf("%s-train-%d", node, i) }

// View implements nodestate.Source.
func (n *simNode) View() (agent.View, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.topo.view(n.name, n.healthy), n.changed
}

// List implements nodestate.PodLister: the kubelet's PodResources answer.
func (n *simNode) List(context.Context) ([]podresources.ContainerDevices, error) { return n.pods, nil }

// flap turns dev's health over, as the node watcher's port poll does when
// a port goes down or comes back.
func (n *simNode) flap(dev string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := maps.Clone(n.healthy)
	h[dev] = !h[dev]
	n.healthy = h
	close(n.changed)
	n.changed = make(chan struct{})
}

func (n *simNode) health() map[string]bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.healthy
}

// desiredSlices are the node's ResourceSlices of our driver, built as
// dra.Driver.Publish builds them, and of the simulated GPU driver.
func (n *simNode) desiredSlices() []*resourceapi.ResourceSlice {
	devs, _ := dra.Devices(n.topo.draMembers, n.health())
	dra.InPool(devs, draPool)
	var out []*resourceapi.ResourceSlice
	ours := dra.Slices(devs)
	for i, s := range ours {
		out = append(out, n.slice(fmt.Sprintf("%s-%s-%d", n.name, dra.DriverName, i), dra.DriverName,
			dra.PoolName(n.name, draPool), len(ours), s))
	}
	out = append(out, n.slice(n.name+"-"+gpuDriver+"-0", gpuDriver, n.name, 1, n.topo.gpus))
	return out
}

func (n *simNode) slice(name, driver, pool string, count int, devs []resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: n.name, UID: n.uid, Controller: ptr.To(true)}}},
		Spec: resourceapi.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(n.name), Devices: devs,
			Pool: resourceapi.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: int64(count)}},
	}
}

// syncSlices writes what changed: a create for a new slice, one update for
// a changed one with the pool's generation kept, which is what the
// resourceslice controller of k8s.io/dynamic-resource-allocation (the
// kubeletplugin helper's) does when at most one slice of a pool changes.
// It returns the writes made.
func (n *simNode) syncSlices(ctx context.Context, c kubernetes.Interface) (int, error) {
	want := n.desiredSlices()
	writes := 0
	for i, w := range want {
		if i < len(n.slices) && n.slices[i] != nil {
			cur := n.slices[i]
			if apiequality.Semantic.DeepEqual(cur.Spec.Devices, w.Spec.Devices) {
				continue
			}
			upd := cur.DeepCopy()
			upd.Spec.Devices = w.Spec.Devices
			got, err := c.ResourceV1().ResourceSlices().Update(ctx, upd, metav1.UpdateOptions{})
			if err != nil {
				return writes, fmt.Errorf("update resourceslice %s: %w", w.Name, err)
			}
			n.slices[i] = got
			writes++
			continue
		}
		got, err := c.ResourceV1().ResourceSlices().Create(ctx, w, metav1.CreateOptions{})
		if err != nil {
			return writes, fmt.Errorf("create resourceslice %s: %w", w.Name, err)
		}
		n.slices = append(n.slices, got)
		writes++
	}
	return writes, nil
}

// nodeObject is the Node a kubelet registers for a GPU node (labels,
// capacity, conditions, addresses, node info), without status.images: the
// reference the per-node bytes are held against is, if anything, smaller
// than a real node's.
func nodeObject(name string, i int) *corev1.Node {
	q := resource.MustParse
	res := corev1.ResourceList{corev1.ResourceCPU: q("192"), corev1.ResourceMemory: q("2063731Mi"),
		corev1.ResourcePods: q("110"), corev1.ResourceEphemeralStorage: q("3749284Mi"),
		"hugepages-1Gi": q("0"), "hugepages-2Mi": q("0"), roceResource: q(fmt.Sprint(roceSlots))}
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "hgx-h100-8", "topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%4),
			"topology.kubernetes.io/region": "region-1",
		}, Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.%d.%d.%d", 1+i/65536, i/256%256, i%256)},
				{Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{MachineID: fmt.Sprintf("%032x", i+1), SystemUUID: fmt.Sprintf("4c4c4544-%04x-4e10-8058-c2c04f4b3233", i),
				BootID: fmt.Sprintf("5a3e1f2c-%04x-4d5e-9f00-1c2d3e4f5a6b", i), KernelVersion: "6.8.0-60-generic",
				OSImage: "Ubuntu 24.04.2 LTS", ContainerRuntimeVersion: "containerd://2.2.9", KubeletVersion: "v1.34.10", OperatingSystem: "linux", Architecture: "amd64"},
		},
	}
}

// leaseObject is the node's heartbeat in kube-node-lease, as the kubelet
// keeps it (40 s duration).
func leaseObject(n *corev1.Node) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
}

// podObject is one of a node's workload pods, bound to it and holding a
// slot of the shared RoCE pool.
func podObject(ns, name, node string) *corev1.Pod {
	q := resource.MustParse
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "train", "job": ns}},
		Spec: corev1.PodSpec{NodeName: node, AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/train:2026.11",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: q("8"), corev1.ResourceMemory: q("64Gi"), roceResource: q("1")},
					Limits:   corev1.ResourceList{roceResource: q("1")}}}}},
	}
}
