package main

import (
	"fmt"
	"os"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// gpuDriver is the simulated GPU DRA driver: its slices carry the standard
// pcieRoot attribute, as NVIDIA's does, which a claim matches with our NICs'.
const gpuDriver = "gpu.scale-sim.kube-rdma.io"

// Pools of the simulated daemon's config. On the HGX node the eight
// GPU-paired InfiniBand NICs are a DRA pool (ResourceSlices) and the two
// RoCE NICs a shared device-plugin pool of rocSlots slots, which the eight
// pods of each node hold (the allocations RDMANodeState lists). On the
// 1,024-device node every device is in the DRA pool.
const (
	draPool      = "ib"
	rocePool     = "roce"
	roceResource = "rdma.kube-rdma.io/roce"
	roceSlots    = 16
)

// topo is one nodesim topology, scanned once by the real discovery code:
// every simulated node of that kind starts from the same discovery.Node.
type topo struct {
	name string
	node *discovery.Node
	numa int
	// draMembers are the DRA pool's devices; roce the shared pool's.
	draMembers []discovery.RDMADevice
	roce       []string
	// switchOf maps a published device name (ours and the GPU driver's)
	// to the PCIe switch above it (dra.PCIeSwitch): the alignment check.
	switchOf map[string]string
	gpus     []resourceapi.Device
}

func scanTopology(t nodesim.Topology) (*topo, error) {
	dir, err := os.MkdirTemp("", "scale-nodesim-")
	if err != nil {
		return nil, fmt.Errorf("nodesim dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	tree, err := nodesim.Build(dir, t)
	if err != nil {
		return nil, fmt.Errorf("nodesim %s: %w", t.Name, err)
	}
	s := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}
	n, err := s.Scan()
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", t.Name, err)
	}
	tp := &topo{name: t.Name, node: n, numa: s.NUMANodes(), switchOf: map[string]string{}}
	for _, d := range n.RDMADevices {
		if d.LinkLayer == "Ethernet" && len(n.RDMADevices) <= 16 {
			tp.roce = append(tp.roce, d.Name)
			continue
		}
		tp.draMembers = append(tp.draMembers, d)
		tp.switchOf[dra.DeviceName(d)] = dra.PCIeSwitch(d.Location())
	}
	for i, g := range n.GPUs {
		name := fmt.Sprintf("gpu-%d", i)
		tp.switchOf[name] = dra.PCIeSwitch(g.Location())
		root, uuid := g.PCIeRoot, g.UUID
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: &root},
			gpuDriver + "/uuid":                             {StringValue: &uuid},
		}
		// As a GPU driver following docs/dra.md's rule would: the prioritized
		// claim matches GPU and NIC on it.
		if sw := tp.switchOf[name]; sw != "" {
			attrs[dra.AttrPCIeSwitch] = resourceapi.DeviceAttribute{StringValue: &sw}
		}
		tp.gpus = append(tp.gpus, resourceapi.Device{Name: name, Attributes: attrs})
	}
	return tp, nil
}

// view is the agent's view of a node of this topology with the given
// health: what agent.Agent hands the publisher.
func (t *topo) view(node string, healthy map[string]bool) agent.View {
	v := agent.View{NodeName: node, NetnsMode: "exclusive", NUMANodes: t.numa,
		Snapshot: &nodewatch.Snapshot{Node: t.node, Healthy: healthy}}
	var members []string
	for _, d := range t.draMembers {
		members = append(members, d.Name)
	}
	v.DRAPools = []agent.PoolView{{Name: draPool, Mode: config.Exclusive, Members: members}}
	if len(t.roce) > 0 {
		p := agent.PoolView{Name: rocePool, Resource: roceResource, Mode: config.Shared, Slots: roceSlots,
			Members: slices.Clone(t.roce), Capacity: roceSlots, ByID: map[string][]string{}}
		up := 0
		for _, m := range t.roce {
			if healthy[m] {
				up++
			}
		}
		if up > 0 {
			p.Allocatable = roceSlots
		}
		for i := range roceSlots {
			p.ByID[fmt.Sprintf("roce-%d", i)] = t.roce
		}
		v.Pools = []agent.PoolView{p}
	}
	return v
}

// allHealthy is the health of a node whose ports are all up.
func (t *topo) allHealthy() map[string]bool {
	h := make(map[string]bool, len(t.node.RDMADevices))
	for _, d := range t.node.RDMADevices {
		h[d.Name] = true
	}
	return h
}
