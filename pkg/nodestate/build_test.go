package nodestate

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

var now = time.Date(2026, 11, 23, 18, 0, 0, 500, time.UTC)

func ib(name, pci, root string, numa int, state string) discovery.RDMADevice {
	return discovery.RDMADevice{Name: name, Kind: discovery.KindPF, PCIAddress: pci, NUMANode: numa, PCIeRoot: root,
		PCIPath: []string{"0000:" + root[7:] + ":01.0", pci}, LinkLayer: "InfiniBand", Netdevs: []string{"ib" + name[5:]},
		Ports: []discovery.Port{{Port: 1, State: state, PhysState: "LinkUp", LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", Netdev: "ib" + name[5:]}}}
}

func roce(name, pci string) discovery.RDMADevice {
	return discovery.RDMADevice{Name: name, Kind: discovery.KindVF, PCIAddress: pci, NUMANode: 1, PCIeRoot: "pci0000:80",
		LinkLayer: "Ethernet", Netdevs: []string{"eth" + name[5:]},
		Ports: []discovery.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Netdev: "eth" + name[5:],
			GIDs: []discovery.GID{{Index: 1, Type: "RoCE v2", GID: "fe80::1"}, {Index: 3, Type: "RoCE v2", GID: "0000:0000:0000:0000:0000:ffff:0a00:0001"}}}}}
}

// node: two IB HCAs (mlx5_10 down) on NUMA 0, one RoCE VF on NUMA 1, one GPU
// under mlx5_2's root.
func testView() agent.View {
	minor := 0
	n := &discovery.Node{
		RDMADevices: []discovery.RDMADevice{ib("mlx5_10", "0000:1b:00.0", "pci0000:1a", 0, "DOWN"),
			ib("mlx5_2", "0000:19:00.0", "pci0000:18", 0, "ACTIVE"), roce("mlx5_30", "0000:81:00.2")},
		GPUs: []discovery.GPU{{PCIAddress: "0000:19:01.0", NUMANode: 0, PCIeRoot: "pci0000:18", UUID: "GPU-1", Minor: &minor,
			PCIPath: []string{"0000:18:01.0", "0000:19:01.0"}}},
	}
	return agent.View{
		NodeName: "n1", NetnsMode: "exclusive", NUMANodes: 2,
		Snapshot:     &nodewatch.Snapshot{Node: n, Healthy: map[string]bool{"mlx5_2": true, "mlx5_30": true}},
		ConfigErrors: []string{"pool \"x\" overlaps"},
		Pools: []agent.PoolView{
			{Name: "ib", Resource: "rdma.kube-rdma.io/ib", Mode: "exclusive", Members: []string{"mlx5_2", "mlx5_10"},
				Capacity: 2, Allocatable: 1, ByID: map[string][]string{"0000:19:00.0": {"mlx5_2"}, "0000:1b:00.0": {"mlx5_10"}}},
			{Name: "roce", Resource: "rdma.kube-rdma.io/roce", Mode: "shared", Slots: 2, Members: []string{"mlx5_30"},
				Capacity: 2, Allocatable: 2, ByID: map[string][]string{"roce-0": {"mlx5_30"}, "roce-1": {"mlx5_30"}}},
		},
	}
}

func TestBuild(t *testing.T) {
	three := 3
	devices := []v1alpha1.Device{
		{Name: "mlx5_2", Kind: "PF", PCIAddress: "0000:19:00.0", NUMANode: 0, PCIeRoot: "pci0000:18", LinkLayer: "InfiniBand",
			Netdevs: []string{"ib2"}, Healthy: true, Pools: []string{"ib"},
			Ports: []v1alpha1.Port{{Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", Netdev: "ib2"}}},
		{Name: "mlx5_10", Kind: "PF", PCIAddress: "0000:1b:00.0", NUMANode: 0, PCIeRoot: "pci0000:1a", LinkLayer: "InfiniBand",
			Netdevs: []string{"ib10"}, Healthy: false, Pools: []string{"ib"},
			Ports: []v1alpha1.Port{{Port: 1, State: "DOWN", PhysState: "LinkUp", LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", Netdev: "ib10"}}},
		{Name: "mlx5_30", Kind: "VF", PCIAddress: "0000:81:00.2", NUMANode: 1, PCIeRoot: "pci0000:80", LinkLayer: "Ethernet",
			Netdevs: []string{"eth30"}, Healthy: true, Pools: []string{"roce"},
			Ports: []v1alpha1.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Netdev: "eth30", RoCEv2GIDIndex: &three}}},
	}
	minor := 0
	base := v1alpha1.RDMANodeStateStatus{
		StateVersion: v1alpha1.StateVersion, DaemonVersion: "v1.2.3", RDMANetnsMode: "exclusive",
		LastUpdate:   metav1.NewTime(now.Truncate(time.Second)),
		Devices:      devices,
		GPUs:         []v1alpha1.GPU{{PCIAddress: "0000:19:01.0", UUID: "GPU-1", Minor: &minor, NUMANode: 0, PCIeRoot: "pci0000:18"}},
		Affinity:     []v1alpha1.AffinityRow{{GPU: "0000:19:01.0", Levels: []string{"PHB", "NODE", "SYS"}}},
		ConfigErrors: []string{"pool \"x\" overlaps"},
	}
	pools := func(ib, roce int) []v1alpha1.Pool {
		return []v1alpha1.Pool{
			{Name: "ib", Resource: "rdma.kube-rdma.io/ib", Mode: "exclusive", Capacity: 2, Allocatable: 1, Allocated: ib, Devices: []string{"mlx5_2", "mlx5_10"}},
			{Name: "roce", Resource: "rdma.kube-rdma.io/roce", Mode: "shared", Slots: 2, Capacity: 2, Allocatable: 2, Allocated: roce, Devices: []string{"mlx5_30"}},
		}
	}
	tests := []struct {
		name  string
		view  agent.View
		ctrs  []podresources.ContainerDevices
		recs  []attachment.Attachment
		cni   string
		patch func(*v1alpha1.RDMANodeStateStatus)
	}{
		{name: "no pods", view: testView(), patch: func(s *v1alpha1.RDMANodeStateStatus) {
			s.Pools = pools(0, 0)
			s.Summary = v1alpha1.Summary{Devices: 3, Unhealthy: 1, GPUs: 1,
				Table: &v1alpha1.SummaryTable{Pools: "ib 0/1/2, roce 0/2/2", UnhealthyDevices: "mlx5_10", LinkLayers: "Ethernet,InfiniBand"}}
		}},
		{name: "allocations of our resources only, sorted, ids deduplicated", view: testView(),
			ctrs: []podresources.ContainerDevices{
				{Namespace: "b", Pod: "p2", Container: "c", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-1"}},
				{Namespace: "a", Pod: "p1", Container: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1"}},
				{Namespace: "a", Pod: "p1", Container: "c", Resource: "rdma.kube-rdma.io/ib", DeviceIDs: []string{"0000:1b:00.0", "0000:19:00.0", "0000:19:00.0"}},
				{Namespace: "b", Pod: "p3", Container: "c", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-0"}},
				{Namespace: "b", Pod: "p4", Container: "c", Resource: "rdma.kube-rdma.io/roce"},
			},
			patch: func(s *v1alpha1.RDMANodeStateStatus) {
				s.Pools = pools(2, 2)
				s.Summary = v1alpha1.Summary{Devices: 3, Unhealthy: 1, GPUs: 1, Pods: 3,
					Table: &v1alpha1.SummaryTable{Pools: "ib 2/1/2, roce 2/2/2", UnhealthyDevices: "mlx5_10", LinkLayers: "Ethernet,InfiniBand"}}
				s.Allocations = []v1alpha1.Allocation{
					{Namespace: "a", Pod: "p1", Container: "c", Resource: "rdma.kube-rdma.io/ib", DeviceIDs: []string{"0000:19:00.0", "0000:1b:00.0"},
						RDMADevices: []string{"mlx5_2", "mlx5_10"}, Netdevs: []string{"ib2", "ib10"}},
					{Namespace: "b", Pod: "p2", Container: "c", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-1"},
						RDMADevices: []string{"mlx5_30"}, Netdevs: []string{"eth30"}},
					{Namespace: "b", Pod: "p3", Container: "c", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-0"},
						RDMADevices: []string{"mlx5_30"}, Netdevs: []string{"eth30"}},
				}
			}},
		{name: "attachment records name the devices in the pod", view: testView(), cni: "chained",
			ctrs: []podresources.ContainerDevices{
				{Namespace: "a", Pod: "p1", Container: "c", Resource: "rdma.kube-rdma.io/ib", DeviceIDs: []string{"0000:1b:00.0", "0000:19:00.0"}},
				{Namespace: "a", Pod: "p1", Container: "d", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-0"}},
			},
			recs: []attachment.Attachment{
				// two records name mlx5_2 for the pod: the greater container ID wins
				{Key: attachment.Key{ContainerID: "s2", IfName: "net1"}, Complete: true, Network: "ib-net", Pod: &attachment.PodRef{Namespace: "a", Name: "p1"},
					Devices: []attachment.Device{{RDMA: "mlx5_2", PodIfName: "net1", Host: attachment.HostLink{Name: "ib2"}}}},
				{Key: attachment.Key{ContainerID: "s1", IfName: "net1"}, Complete: true, Network: "ib-net", Pod: &attachment.PodRef{Namespace: "a", Name: "p1"},
					Devices: []attachment.Device{{RDMA: "mlx5_2", PodIfName: "old1", Host: attachment.HostLink{Name: "ib2"}},
						{RDMA: "mlx5_10", PodIfName: "net2", PodRDMA: "rxe_p", Host: attachment.HostLink{Name: "ib10"}}}},
				// not complete, another pod, no pod, a device not in the allocation
				{Key: attachment.Key{ContainerID: "s3", IfName: "net9"}, Pod: &attachment.PodRef{Namespace: "a", Name: "p1"},
					Devices: []attachment.Device{{RDMA: "mlx5_30", PodIfName: "net9"}}},
				{Key: attachment.Key{ContainerID: "s4", IfName: "net1"}, Complete: true, Pod: &attachment.PodRef{Namespace: "b", Name: "p1"},
					Devices: []attachment.Device{{RDMA: "mlx5_30", PodIfName: "x"}}},
				{Key: attachment.Key{ContainerID: "s5", IfName: "net1"}, Complete: true, Devices: []attachment.Device{{RDMA: "mlx5_30", PodIfName: "y"}}},
			},
			patch: func(s *v1alpha1.RDMANodeStateStatus) {
				s.Pools = pools(2, 1)
				s.Summary = v1alpha1.Summary{Devices: 3, Unhealthy: 1, GPUs: 1, Pods: 1,
					Table: &v1alpha1.SummaryTable{Pools: "ib 2/1/2, roce 1/2/2", UnhealthyDevices: "mlx5_10", LinkLayers: "Ethernet,InfiniBand"}}
				s.CNI = &v1alpha1.CNIStatus{Mode: "chained", Attachments: 4} // the complete records
				s.Allocations = []v1alpha1.Allocation{
					{Namespace: "a", Pod: "p1", Container: "c", Resource: "rdma.kube-rdma.io/ib", DeviceIDs: []string{"0000:19:00.0", "0000:1b:00.0"},
						RDMADevices: []string{"mlx5_2", "mlx5_10"}, Netdevs: []string{"ib2", "ib10"},
						Attached: []v1alpha1.AttachedDevice{
							{RDMADevice: "mlx5_2", Netdev: "ib2", PodNetdev: "net1", Network: "ib-net"},
							{RDMADevice: "mlx5_10", PodRDMADevice: "rxe_p", Netdev: "ib10", PodNetdev: "net2", Network: "ib-net"}}},
					{Namespace: "a", Pod: "p1", Container: "d", Resource: "rdma.kube-rdma.io/roce", DeviceIDs: []string{"roce-0"},
						RDMADevices: []string{"mlx5_30"}, Netdevs: []string{"eth30"}},
				}
			}},
		{name: "no snapshot yet", view: agent.View{NetnsMode: "unknown"}, patch: func(s *v1alpha1.RDMANodeStateStatus) {
			*s = v1alpha1.RDMANodeStateStatus{StateVersion: v1alpha1.StateVersion, DaemonVersion: "v1.2.3", RDMANetnsMode: "unknown",
				LastUpdate: s.LastUpdate, Summary: v1alpha1.Summary{Table: &v1alpha1.SummaryTable{}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := base
			tt.patch(&want)
			got := Build(Input{View: tt.view, Containers: tt.ctrs, Attachments: tt.recs, CNIMode: tt.cni, DaemonVersion: "v1.2.3", Now: now})
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Build (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSameContent(t *testing.T) {
	a := Build(Input{View: testView(), Now: now})
	b := Build(Input{View: testView(), Now: now.Add(time.Hour)})
	if !sameContent(&a, &b) {
		t.Error("statuses that differ only in lastUpdate differ")
	}
	v := testView()
	v.Snapshot.Healthy["mlx5_10"] = true
	c := Build(Input{View: v, Now: now})
	if sameContent(&a, &c) {
		t.Error("a device's health change is no change")
	}
	if sameContent(&a, nil) {
		t.Error("a status and nothing written are the same")
	}
}

// A gpuAligned pool's device IDs are slots, each standing for every member:
// the allocation names the devices the CNI plugin bound (its records), and
// every member until it bound any.
func TestBuildGPUAligned(t *testing.T) {
	view := testView()
	view.Pools = []agent.PoolView{{Name: "gpu", Resource: "rdma.kube-rdma.io/gpu", Mode: "exclusive", Binding: config.GPUAligned,
		Members: []string{"mlx5_2", "mlx5_10"}, Capacity: 2, Allocatable: 1,
		ByID: map[string][]string{"gpu-slot-0": {"mlx5_2", "mlx5_10"}, "gpu-slot-1": {"mlx5_2", "mlx5_10"}}}}
	ctrs := []podresources.ContainerDevices{
		{Namespace: "a", Pod: "bound", Container: "c", Resource: "rdma.kube-rdma.io/gpu", DeviceIDs: []string{"gpu-slot-0"}},
		{Namespace: "a", Pod: "early", Container: "c", Resource: "rdma.kube-rdma.io/gpu", DeviceIDs: []string{"gpu-slot-1"}},
	}
	recs := []attachment.Attachment{{Key: attachment.Key{ContainerID: "s1", IfName: "eth0"}, Complete: true,
		Pod: &attachment.PodRef{Namespace: "a", Name: "bound"}, Binding: &attachment.Binding{Pool: "gpu"},
		Devices: []attachment.Device{{RDMA: "mlx5_10", PodIfName: "net1", Host: attachment.HostLink{Name: "ib10"}}}}}
	got := Build(Input{View: view, Containers: ctrs, Attachments: recs, Now: now}).Allocations
	var names []string
	for _, a := range got {
		names = append(names, a.Pod+"="+strings.Join(a.RDMADevices, ",")+"/"+strings.Join(a.Netdevs, ","))
	}
	if diff := cmp.Diff([]string{"bound=mlx5_10/ib10", "early=mlx5_2,mlx5_10/ib2,ib10"}, names); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
	if len(got) == 0 || len(got[0].Attached) != 1 || got[0].Attached[0].PodNetdev != "net1" {
		t.Errorf("bound pod's attached devices: %+v", got)
	}
}

// TestBuildChainedPool: the chained entry's pool is published with the mode,
// and only in chained mode.
func TestBuildChainedPool(t *testing.T) {
	st := Build(Input{View: testView(), CNIMode: "chained", CNIChainedPool: "vf", Now: time.Unix(1700000000, 0)})
	if st.CNI == nil || st.CNI.Mode != "chained" || st.CNI.ChainedPool != "vf" {
		t.Errorf("status.cni = %+v, want chained, pool vf", st.CNI)
	}
}
