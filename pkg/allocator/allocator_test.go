package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

func loc(numa int, root string, path ...string) discovery.Location {
	return discovery.Location{PCIeRoot: root, PCIPath: path, NUMANode: numa}
}

// dgxH100 is the eight compute NICs of a DGX H100: each behind its own PCIe
// switch on its own host bridge, four per NUMA node.
func dgxH100() Topology {
	nic := func(numa int, root, sw, bdf string) Device {
		return Device{ID: bdf, Location: loc(numa, root, sw, sw[:8]+"1.0", bdf)}
	}
	return Topology{NUMANodes: 2, Devices: []Device{
		nic(0, "pci0000:15", "0000:15:01.0", "0000:18:00.0"),
		nic(0, "pci0000:3d", "0000:3d:01.0", "0000:40:00.0"),
		nic(0, "pci0000:48", "0000:48:01.0", "0000:4f:00.0"),
		nic(0, "pci0000:59", "0000:59:01.0", "0000:5e:00.0"),
		nic(1, "pci0000:97", "0000:97:01.0", "0000:9a:00.0"),
		nic(1, "pci0000:bd", "0000:bd:01.0", "0000:c0:00.0"),
		nic(1, "pci0000:cb", "0000:cb:01.0", "0000:ce:00.0"),
		nic(1, "pci0000:d9", "0000:d9:01.0", "0000:dc:00.0"),
	}}
}

// cloudRoCE has two NICs per PCIe switch, two switches per host bridge and
// one host bridge per NUMA node: nic0/nic1 PIX, nic0/nic2 PHB, nic0/nic4 SYS.
func cloudRoCE() Topology {
	var devs []Device
	roots := []string{"pci0000:00", "pci0000:80"}
	for i := range 8 {
		numa, sw := i/4, (i/2)%2
		root := roots[numa]
		rp := root[7:] + ":0" + string(rune('1'+sw)) + ".0"
		swPort := root[7:] + ":1" + string(rune('1'+sw)) + ".0"
		devs = append(devs, Device{ID: "nic" + string(rune('0'+i)), Location: loc(numa, root, "0000:"+rp, "0000:"+swPort, "0000:"+root[7:]+":2"+string(rune('0'+i))+".0")})
	}
	return Topology{NUMANodes: 2, Devices: devs}
}

func ids(t Topology) []string {
	var out []string
	for _, d := range t.Devices {
		out = append(out, d.ID)
	}
	return out
}

func TestClosest(t *testing.T) {
	dgx, roce := dgxH100(), cloudRoCE()
	tests := []struct {
		name string
		topo Topology
		req  Request
		want []string
	}{
		{"dgx one", dgx, Request{Available: ids(dgx), Size: 1}, []string{"0000:18:00.0"}},
		{"dgx two stay on one numa node", dgx, Request{Available: ids(dgx), Size: 2}, []string{"0000:18:00.0", "0000:40:00.0"}},
		{"dgx four fill numa 0", dgx, Request{Available: ids(dgx), Size: 4},
			[]string{"0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:5e:00.0"}},
		{"dgx must-include on numa 1 pulls its neighbours", dgx,
			Request{Available: ids(dgx), MustInclude: []string{"0000:ce:00.0"}, Size: 3},
			[]string{"0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0"}},
		{"dgx numa 0 nearly taken: go to numa 1", dgx,
			Request{Available: []string{"0000:5e:00.0", "0000:9a:00.0", "0000:c0:00.0", "0000:dc:00.0"}, Size: 2},
			[]string{"0000:9a:00.0", "0000:c0:00.0"}},
		{"roce pair under one switch beats lower ids", roce, Request{Available: []string{"nic0", "nic2", "nic3"}, Size: 2},
			[]string{"nic2", "nic3"}},
		{"roce same root complex before other numa", roce, Request{Available: []string{"nic1", "nic3", "nic4", "nic5"}, Size: 2},
			[]string{"nic4", "nic5"}},
		{"roce one switch, then its host bridge", roce, Request{Available: ids(roce), MustInclude: []string{"nic5"}, Size: 3},
			[]string{"nic4", "nic5", "nic6"}},
		{"roce all", roce, Request{Available: ids(roce), Size: 8}, ids(roce)},
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
			// Deterministic whatever the order of the input.
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

func TestClosestErrors(t *testing.T) {
	roce := cloudRoCE()
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"unknown available", Request{Available: []string{"nic0", "nic9"}, Size: 1}, ErrUnknownDevice},
		{"unknown must", Request{Available: []string{"nic0"}, MustInclude: []string{"gpu0"}, Size: 1}, ErrUnknownDevice},
		{"must not available", Request{Available: []string{"nic0"}, MustInclude: []string{"nic1"}, Size: 1}, ErrBadRequest},
		{"zero size", Request{Available: []string{"nic0"}}, ErrBadRequest},
		{"too many", Request{Available: []string{"nic0"}, Size: 2}, ErrBadRequest},
		{"must over size", Request{Available: []string{"nic0", "nic1"}, MustInclude: []string{"nic0", "nic1"}, Size: 1}, ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Closest(roce, tt.req); !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestNearestTo(t *testing.T) {
	roce := cloudRoCE()
	gpuBeside := func(nic int) discovery.Location {
		l := roce.Devices[nic].Location
		path := slices.Clone(l.PCIPath)
		path[len(path)-1] = "0000:ff:00.0"
		return discovery.Location{PCIeRoot: l.PCIeRoot, PCIPath: path, NUMANode: l.NUMANode}
	}
	tests := []struct {
		name    string
		req     Request
		targets []discovery.Location
		want    []string
	}{
		{"one gpu: a nic under its switch", Request{Available: ids(roce), Size: 1}, []discovery.Location{gpuBeside(6)}, []string{"nic6"}},
		{"two gpus apart", Request{Available: ids(roce), Size: 2}, []discovery.Location{gpuBeside(1), gpuBeside(6)}, []string{"nic0", "nic6"}},
		{"switch taken: same host bridge", Request{Available: []string{"nic0", "nic1", "nic4"}, Size: 1}, []discovery.Location{gpuBeside(6)}, []string{"nic4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NearestTo(roce, tt.req, tt.targets)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func BenchmarkClosest1024(b *testing.B) {
	var topo Topology
	topo.NUMANodes = 2
	for i := range 1024 {
		sw := i / 4
		root := "pci0000:" + string(rune('a'+sw%16))
		topo.Devices = append(topo.Devices, Device{ID: string(rune(0x4e00 + i)),
			Location: loc(sw%2, root, root+"-sw"+string(rune('a'+sw/16)), string(rune(0x4e00+i)))})
	}
	req := Request{Available: ids(topo), Size: 8}
	for b.Loop() {
		if _, err := Closest(topo, req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSeedPruning checks that trying one seed per bridge class gives the
// same answer as trying every device, on generated topologies with mixed
// link layers and some unhealthy devices.
func TestSeedPruning(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		var topo Topology
		topo.NUMANodes = 2
		n := 4 + rng.IntN(12)
		for i := range n {
			root := []string{"pci0000:00", "pci0000:40", "pci0000:80"}[rng.IntN(3)]
			sw := fmt.Sprintf("%s-sw%d", root, rng.IntN(3))
			numa := map[string]int{"pci0000:00": 0, "pci0000:40": 0, "pci0000:80": 1}[root]
			path := []string{sw, fmt.Sprintf("dev%02d", i)}
			if rng.IntN(4) == 0 {
				path = []string{sw, sw + "-sub", fmt.Sprintf("dev%02d", i)}
			}
			layer := []string{"", "Ethernet", "InfiniBand"}[rng.IntN(3)]
			topo.Devices = append(topo.Devices, Device{ID: fmt.Sprintf("dev%02d", i), Location: loc(numa, root, path...),
				LinkLayer: layer, Unhealthy: rng.IntN(5) == 0})
		}
		healthy := 0
		for _, d := range topo.Devices {
			if !d.Unhealthy {
				healthy++
			}
		}
		if healthy == 0 {
			continue
		}
		req := Request{Available: ids(topo), Size: 1 + rng.IntN(healthy)}
		fast, err := chooseSeeds(topo, req, closeness{}, true)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := chooseSeeds(topo, req, closeness{}, false)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Fatalf("iteration %d, size %d: pruned seeds differ (-all +pruned)\n%s", iter, req.Size, diff)
		}
	}
}
