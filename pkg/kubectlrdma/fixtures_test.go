package kubectlrdma

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// now is the clock of every test; fixture ages are relative to it.
var now = time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)

// world is what a test cluster holds.
type world struct {
	states []v1alpha1.RDMANodeState
	nodes  []corev1.Node
	pods   []corev1.Pod
}

// scan builds topology t as a sysfs tree and scans it, as the daemon does.
func scan(t *testing.T, topo nodesim.Topology) *discovery.Node {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stateOfScan is the status a daemon would publish for n (what pkg/nodestate
// writes; built here so these tests do not depend on the publisher).
func stateOfScan(name string, n *discovery.Node, netns string, age time.Duration) v1alpha1.RDMANodeState {
	s := v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RDMANodeStateSpec{NodeName: name}}
	st := &s.Status
	st.StateVersion, st.DaemonVersion, st.RDMANetnsMode = v1alpha1.StateVersion, "v0.3.0", netns
	st.LastUpdate = metav1.NewTime(now.Add(-age))
	for _, d := range n.RDMADevices {
		dev := v1alpha1.Device{Name: d.Name, Kind: string(d.Kind), PCIAddress: d.PCIAddress, NUMANode: d.NUMANode,
			PCIeRoot: d.PCIeRoot, LinkLayer: d.LinkLayer, Netdevs: d.Netdevs, Healthy: true}
		for _, p := range d.Ports {
			port := v1alpha1.Port{Port: p.Port, State: p.State, PhysState: p.PhysState, LinkLayer: p.LinkLayer, Rate: p.Rate, Netdev: p.Netdev}
			if len(p.RoCEv2GIDIndexes) > 0 {
				port.RoCEv2GIDIndex = &p.RoCEv2GIDIndexes[0]
			}
			dev.Ports = append(dev.Ports, port)
			dev.Healthy = dev.Healthy && p.Active()
		}
		st.Devices = append(st.Devices, dev)
	}
	level := map[[2]string]string{}
	for _, a := range n.Affinity {
		level[[2]string{a.GPU, a.RDMADevice}] = string(a.Level)
	}
	for _, g := range n.GPUs {
		st.GPUs = append(st.GPUs, v1alpha1.GPU{PCIAddress: g.PCIAddress, UUID: g.UUID, Minor: g.Minor, NUMANode: g.NUMANode, PCIeRoot: g.PCIeRoot})
		r := v1alpha1.AffinityRow{GPU: g.PCIAddress}
		for _, d := range n.RDMADevices {
			r.Levels = append(r.Levels, level[[2]string{g.PCIAddress, d.Name}])
		}
		st.Affinity = append(st.Affinity, r)
	}
	return s
}

func pool(name, mode string, slots int, devices ...string) v1alpha1.Pool {
	return v1alpha1.Pool{Name: name, Resource: resourcePrefix + name, Mode: mode, Slots: slots, Devices: devices}
}

// finish counts the pools and the summary from the devices and allocations.
func finish(s *v1alpha1.RDMANodeState) {
	st := &s.Status
	pods := map[string]bool{}
	for _, a := range st.Allocations {
		pods[a.Namespace+"/"+a.Pod] = true
	}
	for i := range st.Pools {
		p := &st.Pools[i]
		per := max(p.Slots, 1)
		for _, name := range p.Devices {
			p.Capacity += per
			if d := device(s, name); d != nil && d.Healthy {
				p.Allocatable += per
			}
		}
		for _, a := range st.Allocations {
			if a.Resource == p.Resource {
				p.Allocated += len(a.DeviceIDs)
			}
		}
	}
	unhealthy := 0
	for _, d := range st.Devices {
		if !d.Healthy {
			unhealthy++
		}
	}
	st.Summary = v1alpha1.Summary{Devices: len(st.Devices), Unhealthy: unhealthy, GPUs: len(st.GPUs), Pods: len(pods),
		Table: v1alpha1.NewSummaryTable(st)}
}

func node(name string, allocatable map[string]int64) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	for r, v := range allocatable {
		n.Status.Allocatable[corev1.ResourceName(r)] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	return n
}

func pod(ns, name, nodeName string, phase corev1.PodPhase, limits map[string]int64) corev1.Pod {
	c := corev1.Container{Name: "main", Image: "example.com/nccl-tests:1"}
	if len(limits) > 0 {
		c.Resources.Limits = corev1.ResourceList{}
		for r, v := range limits {
			c.Resources.Limits[corev1.ResourceName(r)] = *resource.NewQuantity(v, resource.DecimalSI)
		}
	}
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{c}}}
	p.Status.Phase = phase
	if nodeName != "" {
		p.Status.PodIP = fmt.Sprintf("10.244.0.%d", 10+len(name))
	}
	return p
}

func alloc(ns, podName, res string, ids, devices, netdevs []string) v1alpha1.Allocation {
	return v1alpha1.Allocation{Namespace: ns, Pod: podName, Container: "main", Resource: res, DeviceIDs: ids, RDMADevices: devices, Netdevs: netdevs}
}
