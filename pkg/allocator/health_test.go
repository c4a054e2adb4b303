package allocator

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

const (
	ib  = "InfiniBand"
	eth = "Ethernet"
)

// with returns topo with each device's link layer set from layers (by
// position) and the named devices marked unhealthy.
func with(topo Topology, layers []string, unhealthy ...string) Topology {
	topo.Devices = slices.Clone(topo.Devices)
	for i := range topo.Devices {
		if i < len(layers) {
			topo.Devices[i].LinkLayer = layers[i]
		}
		topo.Devices[i].Unhealthy = slices.Contains(unhealthy, topo.Devices[i].ID)
	}
	return topo
}

// mixedRoCE is cloudRoCE with the ports of each PCIe switch on different
// link layers, except nic2/nic3: the only InfiniBand pair under one switch.
//
//	numa 0: switch 1 nic0 IB, nic1 Eth; switch 2 nic2 IB, nic3 IB
//	numa 1: switch 1 nic4 IB, nic5 Eth; switch 2 nic6 IB, nic7 Eth
var mixedLayers = []string{ib, eth, ib, ib, ib, eth, ib, eth}

func TestClosestHealthAndLinkLayer(t *testing.T) {
	roce := cloudRoCE()
	mixed := with(roce, mixedLayers)
	tests := []struct {
		name string
		topo Topology
		req  Request
		want []string
	}{
		{"unhealthy device under the switch is skipped", with(roce, nil, "nic1"),
			Request{Available: ids(roce), Size: 2}, []string{"nic2", "nic3"}},
		{"unhealthy neighbour of a must-include is skipped", with(roce, nil, "nic5"),
			Request{Available: ids(roce), MustInclude: []string{"nic4"}, Size: 2}, []string{"nic4", "nic6"}},
		{"unhealthy must-include is kept", with(roce, nil, "nic1"),
			Request{Available: ids(roce), MustInclude: []string{"nic1"}, Size: 2}, []string{"nic0", "nic1"}},
		{"ib and eth under one switch: a same-layer pair", mixed,
			Request{Available: ids(roce), Size: 2}, []string{"nic2", "nic3"}},
		{"must-include eth: an eth set", mixed,
			Request{Available: ids(roce), MustInclude: []string{"nic1"}, Size: 2}, []string{"nic1", "nic5"}},
		{"must-include ib: its switch neighbour is eth, so the next ib", mixed,
			Request{Available: ids(roce), MustInclude: []string{"nic0"}, Size: 2}, []string{"nic0", "nic2"}},
		{"equally close layers: the smaller ids", with(roce, []string{ib, eth, ib, eth, ib, eth, ib, eth}),
			Request{Available: ids(roce), Size: 2}, []string{"nic0", "nic2"}},
		{"equally close layers, other way round: the smaller ids", with(roce, []string{eth, ib, eth, ib, eth, ib, eth, ib}),
			Request{Available: ids(roce), Size: 2}, []string{"nic0", "nic2"}},
		{"same layer on the other numa node beats a mixed switch pair", mixed,
			Request{Available: []string{"nic0", "nic1", "nic4"}, Size: 2}, []string{"nic0", "nic4"}},
		{"unknown layer goes with either", with(roce, []string{ib, "", eth, eth}),
			Request{Available: []string{"nic0", "nic1", "nic2"}, Size: 2}, []string{"nic0", "nic1"}},
		{"no layer can fill the size: mixed", mixed,
			Request{Available: []string{"nic0", "nic1"}, Size: 2}, []string{"nic0", "nic1"}},
		{"no layer can fill the size: mixed, closest", mixed,
			Request{Available: []string{"nic0", "nic1", "nic4", "nic5", "nic6"}, Size: 4}, []string{"nic0", "nic1", "nic4", "nic5"}},
		{"must-include layer cannot fill the size: mixed", mixed,
			Request{Available: []string{"nic0", "nic1", "nic2"}, MustInclude: []string{"nic1"}, Size: 2}, []string{"nic0", "nic1"}},
		{"must-include of both layers: no layer kept", mixed,
			Request{Available: ids(roce), MustInclude: []string{"nic0", "nic1"}, Size: 3}, []string{"nic0", "nic1", "nic2"}},
		{"unhealthy and layers together", with(roce, mixedLayers, "nic3"),
			Request{Available: ids(roce), Size: 2}, []string{"nic0", "nic2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Closest(tt.topo, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			rev := tt.req
			rev.Available = slices.Clone(tt.req.Available)
			slices.Reverse(rev.Available)
			topo := tt.topo
			topo.Devices = slices.Clone(tt.topo.Devices)
			slices.Reverse(topo.Devices)
			again, err := Closest(topo, rev)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("reversed input changed the answer (-first +reversed)\n%s", diff)
			}
		})
	}
}

func TestNotEnoughHealthy(t *testing.T) {
	roce := with(cloudRoCE(), nil, "nic1", "nic2")
	for _, req := range []Request{
		{Available: []string{"nic0", "nic1", "nic2"}, Size: 2},
		{Available: []string{"nic0", "nic1", "nic2"}, MustInclude: []string{"nic1"}, Size: 3},
	} {
		if got, err := Closest(roce, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Closest(%+v) = %v, %v; want %v", req, got, err, ErrBadRequest)
		}
		targets := []discovery.Location{roce.Devices[0].Location}
		if got, err := NearestTo(roce, req, targets); !errors.Is(err, ErrBadRequest) {
			t.Errorf("NearestTo(%+v) = %v, %v; want %v", req, got, err, ErrBadRequest)
		}
	}
}

func TestNearestToHealthAndLinkLayer(t *testing.T) {
	roce := cloudRoCE()
	mixed := with(roce, mixedLayers)
	gpuBeside := func(nic int) discovery.Location {
		l := roce.Devices[nic].Location
		path := slices.Clone(l.PCIPath)
		path[len(path)-1] = "0000:ff:00.0"
		return discovery.Location{PCIeRoot: l.PCIeRoot, PCIPath: path, NUMANode: l.NUMANode}
	}
	tests := []struct {
		name    string
		topo    Topology
		req     Request
		targets []discovery.Location
		want    []string
	}{
		{"nic under the gpu's switch unhealthy: its neighbour", with(roce, nil, "nic6"),
			Request{Available: ids(roce), Size: 1}, []discovery.Location{gpuBeside(6)}, []string{"nic7"}},
		{"two gpus, one nic each, one layer", mixed,
			Request{Available: ids(roce), Size: 2}, []discovery.Location{gpuBeside(1), gpuBeside(7)},
			[]string{"nic0", "nic6"}},
		{"one gpu: the nearest same-layer pair", mixed,
			Request{Available: ids(roce), Size: 2}, []discovery.Location{gpuBeside(0)}, []string{"nic0", "nic2"}},
		{"must-include eth: the eth nic under the gpu's switch", mixed,
			Request{Available: ids(roce), MustInclude: []string{"nic5"}, Size: 2}, []discovery.Location{gpuBeside(0)},
			[]string{"nic1", "nic5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NearestTo(tt.topo, tt.req, tt.targets)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
