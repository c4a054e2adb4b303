package allocator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// h100Buses are the DGX H100 host bridges with the bus of the compute NIC
// and of the GPU behind each, and the NIC's name: four per NUMA node.
var h100Buses = []struct {
	root, nic, gpu int
	name           string
}{
	{0x15, 0x18, 0x1b, "mlx5_0"}, {0x3d, 0x40, 0x43, "mlx5_3"}, {0x48, 0x4f, 0x52, "mlx5_4"}, {0x59, 0x5e, 0x61, "mlx5_5"},
	{0x97, 0x9a, 0x9d, "mlx5_6"}, {0xbd, 0xc0, 0xc3, "mlx5_9"}, {0xcb, 0xce, 0xd1, "mlx5_10"}, {0xd9, 0xdc, 0xdf, "mlx5_11"},
}

// h100Node is an eight-GPU H100 node: under each host bridge one PCIe
// switch with a GPU and a ConnectX-7 InfiniBand NIC. In the HGX layout
// (pxb false) both hang off the switch, PIX; in the DGX layout the GPU sits
// behind a second switch, PXB. Two dual-port storage cards, one port
// InfiniBand and one Ethernet (mlx5_1/2 on NUMA 0, mlx5_7/8 on NUMA 1),
// have host bridges of their own and no GPU.
func h100Node(pxb bool) (Topology, []discovery.Location) {
	topo := Topology{NUMANodes: 2}
	var gpus []discovery.Location
	bdf := func(bus, dev int) string { return fmt.Sprintf("0000:%02x:%02x.0", bus, dev) }
	for i, b := range h100Buses {
		numa, root := i/4, fmt.Sprintf("pci0000:%02x", b.root)
		rp, up := bdf(b.root, 1), bdf(b.root+1, 0)
		topo.Devices = append(topo.Devices, Device{ID: b.name, LinkLayer: ib,
			Location: loc(numa, root, rp, up, bdf(b.root+2, 0), bdf(b.nic, 0))})
		gpu := loc(numa, root, rp, up, bdf(b.root+2, 1), bdf(b.gpu, 0))
		if pxb {
			gpu = loc(numa, root, rp, up, bdf(b.root+2, 1), bdf(b.gpu-2, 0), bdf(b.gpu-1, 0), bdf(b.gpu, 0))
		}
		gpus = append(gpus, gpu)
	}
	for _, s := range []struct {
		numa, bus int
		ib, eth   string
	}{{0, 0x29, "mlx5_1", "mlx5_2"}, {1, 0xa8, "mlx5_7", "mlx5_8"}} {
		root, rp := fmt.Sprintf("pci0000:%02x", s.bus-1), bdf(s.bus-1, 1)
		topo.Devices = append(topo.Devices,
			Device{ID: s.ib, LinkLayer: ib, Location: loc(s.numa, root, rp, bdf(s.bus, 0))},
			Device{ID: s.eth, LinkLayer: eth, Location: loc(s.numa, root, rp, fmt.Sprintf("0000:%02x:00.1", s.bus))})
	}
	return topo, gpus
}

// computeNICs are the h100Node NICs next to a GPU.
func computeNICs() []string {
	var out []string
	for _, b := range h100Buses {
		out = append(out, b.name)
	}
	return out
}

// fourGPUServer is a two-socket PCIe server with four GPUs and two NICs
// where only GPU 0 shares a switch with a NIC: GPU 1 is on another root
// port of the same host bridge (PHB), GPU 2 shares a host bridge but not a
// switch with mlx5_1 (PHB: aligned by root complex, not by switch), GPU 3
// has a host bridge of its own on NUMA 1 (NODE to mlx5_1).
func fourGPUServer() (Topology, []discovery.Location) {
	topo := Topology{NUMANodes: 2, Devices: []Device{
		{ID: "mlx5_0", LinkLayer: eth, Location: loc(0, "pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:08.0", "0000:04:00.0")},
		{ID: "mlx5_1", LinkLayer: eth, Location: loc(1, "pci0000:80", "0000:80:03.0", "0000:83:00.0")},
	}}
	gpus := []discovery.Location{
		loc(0, "pci0000:00", "0000:00:01.0", "0000:01:00.0", "0000:02:10.0", "0000:05:00.0"),
		loc(0, "pci0000:00", "0000:00:03.0", "0000:07:00.0"),
		loc(1, "pci0000:80", "0000:80:01.0", "0000:81:00.0"),
		loc(1, "pci0000:c0", "0000:c0:01.0", "0000:c1:00.0"),
	}
	return topo, gpus
}

// contended is one host bridge where GPU 0 shares a switch with mlx5_0
// (PIX) and GPU 1 and mlx5_1 have root ports of their own: GPU 1 is PHB to
// both NICs. Serving GPU 1 first with its best (then smallest) NIC, as a
// greedy pick would, takes mlx5_0 and leaves GPU 0 at PHB.
func contended() (Topology, []discovery.Location) {
	const root = "pci0000:00"
	topo := Topology{NUMANodes: 1, Devices: []Device{
		{ID: "mlx5_0", Location: loc(0, root, "0000:00:01.0", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0")},
		{ID: "mlx5_1", Location: loc(0, root, "0000:00:03.0", "0000:06:00.0")},
	}}
	gpus := []discovery.Location{
		loc(0, root, "0000:00:01.0", "0000:01:00.0", "0000:02:01.0", "0000:04:00.0"),
		loc(0, root, "0000:00:02.0", "0000:05:00.0"),
	}
	return topo, gpus
}

// besideNIC is a GPU under the same PCIe switch as cloudRoCE's NIC nic.
func besideNIC(nic int, bdf string) discovery.Location {
	l := cloudRoCE().Devices[nic].Location
	path := slices.Clone(l.PCIPath)
	path[len(path)-1] = bdf
	return discovery.Location{PCIeRoot: l.PCIeRoot, PCIPath: path, NUMANode: l.NUMANode}
}

func gpusAt(gpus []discovery.Location, idx ...int) []discovery.Location {
	var out []discovery.Location
	for _, i := range idx {
		out = append(out, gpus[i])
	}
	return out
}

func except(all []string, drop ...string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(s string) bool { return slices.Contains(drop, s) })
}

// paired is a shorthand for Pair.
func paired(gpu int, nic string, l discovery.Level) Pair { return Pair{GPU: gpu, NIC: nic, Level: l} }

func TestAlignToGPUs(t *testing.T) {
	hgx, hgxGPUs := h100Node(false)
	dgx, dgxGPUs := h100Node(true)
	// dgx plus two Ethernet NICs on the host bridges of GPUs 0 and 4, on
	// root ports of their own (PHB to those GPUs).
	dgxEth := dgx
	dgxEth.Devices = append(slices.Clone(dgx.Devices),
		Device{ID: "eth0", LinkLayer: eth, Location: loc(0, "pci0000:15", "0000:15:02.0", "0000:30:00.0")},
		Device{ID: "eth1", LinkLayer: eth, Location: loc(1, "pci0000:97", "0000:97:02.0", "0000:a0:00.0")})
	four, fourGPUs := fourGPUServer()
	cont, contGPUs := contended()
	roce := cloudRoCE()
	twoBeside := []discovery.Location{besideNIC(0, "0000:fe:00.0"), besideNIC(0, "0000:ff:00.0")}
	pix, pxb, phb, node, sys := discovery.PIX, discovery.PXB, discovery.PHB, discovery.NODE, discovery.SYS
	tests := []struct {
		name string
		topo Topology
		req  Request
		gpus []discovery.Location
		want Alignment
	}{
		{"hgx: eight GPUs, each with the NIC under its switch", hgx,
			Request{Available: ids(hgx), Size: 8}, hgxGPUs,
			Alignment{NICs: []string{"mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"},
				Pairs: []Pair{paired(0, "mlx5_0", pix), paired(1, "mlx5_3", pix), paired(2, "mlx5_4", pix), paired(3, "mlx5_5", pix),
					paired(4, "mlx5_6", pix), paired(5, "mlx5_9", pix), paired(6, "mlx5_10", pix), paired(7, "mlx5_11", pix)}}},
		{"dgx: two GPUs across sockets get their own NICs (PXB)", dgx,
			Request{Available: computeNICs(), Size: 2}, gpusAt(dgxGPUs, 5, 2),
			Alignment{NICs: []string{"mlx5_4", "mlx5_9"}, Pairs: []Pair{paired(0, "mlx5_9", pxb), paired(1, "mlx5_4", pxb)}}},
		{"dgx: GPU 0's NIC is taken: a free NIC on its NUMA node", dgx,
			Request{Available: except(computeNICs(), "mlx5_0"), Size: 2}, gpusAt(dgxGPUs, 0, 1),
			Alignment{NICs: []string{"mlx5_3", "mlx5_4"}, Pairs: []Pair{paired(0, "mlx5_4", node), paired(1, "mlx5_3", pxb)}}},
		{"dgx: four GPUs, five NICs: the extra one is the InfiniBand storage port on their node", dgx,
			Request{Available: ids(dgx), Size: 5}, gpusAt(dgxGPUs, 0, 1, 2, 3),
			Alignment{NICs: []string{"mlx5_0", "mlx5_1", "mlx5_3", "mlx5_4", "mlx5_5"},
				Pairs: []Pair{paired(0, "mlx5_0", pxb), paired(1, "mlx5_3", pxb), paired(2, "mlx5_4", pxb), paired(3, "mlx5_5", pxb)}}},
		{"dgx: one GPUDirect-capable pair (PXB) and a SYS one beat two PHB pairs on the other layer", dgxEth,
			Request{Available: []string{"mlx5_0", "mlx5_3", "eth0", "eth1"}, Size: 2}, gpusAt(dgxGPUs, 0, 4),
			Alignment{NICs: []string{"mlx5_0", "mlx5_3"}, Pairs: []Pair{paired(0, "mlx5_0", pxb), paired(1, "mlx5_3", sys)}}},
		{"dgx: one GPU, three NICs: its own, then its node's", dgx,
			Request{Available: computeNICs(), Size: 3}, gpusAt(dgxGPUs, 6),
			Alignment{NICs: []string{"mlx5_10", "mlx5_11", "mlx5_6"}, Pairs: []Pair{paired(0, "mlx5_10", pxb)}}},
		{"hgx: four GPUs, two NICs: the smallest IDs among the equally good", hgx,
			Request{Available: computeNICs(), Size: 2}, gpusAt(hgxGPUs, 3, 2, 1, 0),
			Alignment{NICs: []string{"mlx5_0", "mlx5_3"},
				Pairs: []Pair{{GPU: 0}, {GPU: 1}, paired(2, "mlx5_3", pix), paired(3, "mlx5_0", pix)}}},
		{"hgx: the NIC under GPU 3's switch is unhealthy", with(hgx, nil, "mlx5_5"),
			Request{Available: computeNICs(), Size: 1}, gpusAt(hgxGPUs, 3),
			Alignment{NICs: []string{"mlx5_0"}, Pairs: []Pair{paired(0, "mlx5_0", node)}}},
		{"hgx: a forced NIC on the other socket goes to one GPU, the other keeps its switch", hgx,
			Request{Available: computeNICs(), MustInclude: []string{"mlx5_6"}, Size: 2}, gpusAt(hgxGPUs, 0, 1),
			Alignment{NICs: []string{"mlx5_0", "mlx5_6"}, Pairs: []Pair{paired(0, "mlx5_0", pix), paired(1, "mlx5_6", sys)}}},
		{"hgx: a forced Ethernet storage port keeps the set Ethernet", hgx,
			Request{Available: ids(hgx), MustInclude: []string{"mlx5_2"}, Size: 2}, gpusAt(hgxGPUs, 0),
			Alignment{NICs: []string{"mlx5_2", "mlx5_8"}, Pairs: []Pair{paired(0, "mlx5_2", node)}}},
		{"four-GPU server: GPU 0, listed second, is the one that shares a switch", four,
			Request{Available: ids(four), Size: 1}, gpusAt(fourGPUs, 1, 0),
			Alignment{NICs: []string{"mlx5_0"}, Pairs: []Pair{{GPU: 0}, paired(1, "mlx5_0", pix)}}},
		{"four-GPU server: four GPUs, two NICs: one at PIX, one aligned by root complex only", four,
			Request{Available: ids(four), Size: 2}, fourGPUs,
			Alignment{NICs: []string{"mlx5_0", "mlx5_1"},
				Pairs: []Pair{paired(0, "mlx5_0", pix), {GPU: 1}, paired(2, "mlx5_1", phb), {GPU: 3}}}},
		{"four-GPU server: GPUs 2 and 3 compete for mlx5_1", four,
			Request{Available: ids(four), Size: 2}, gpusAt(fourGPUs, 3, 2),
			Alignment{NICs: []string{"mlx5_0", "mlx5_1"}, Pairs: []Pair{paired(0, "mlx5_0", sys), paired(1, "mlx5_1", phb)}}},
		{"contention: GPU 1, listed first, leaves the switch NIC to GPU 0 (greedy would not)", cont,
			Request{Available: ids(cont), Size: 2}, gpusAt(contGPUs, 1, 0),
			Alignment{NICs: []string{"mlx5_0", "mlx5_1"}, Pairs: []Pair{paired(0, "mlx5_1", phb), paired(1, "mlx5_0", pix)}}},
		{"contention: one NIC for two GPUs goes to the one under its switch", cont,
			Request{Available: ids(cont), Size: 1}, gpusAt(contGPUs, 1, 0),
			Alignment{NICs: []string{"mlx5_0"}, Pairs: []Pair{{GPU: 0}, paired(1, "mlx5_0", pix)}}},
		{"four-GPU server: GPU 1 listed first does not take GPU 0's switch NIC", four,
			Request{Available: ids(four), Size: 2}, gpusAt(fourGPUs, 1, 0),
			Alignment{NICs: []string{"mlx5_0", "mlx5_1"}, Pairs: []Pair{paired(0, "mlx5_1", sys), paired(1, "mlx5_0", pix)}}},
		{"two GPUs and two NICs per switch", roce,
			Request{Available: ids(roce), Size: 2}, twoBeside,
			Alignment{NICs: []string{"nic0", "nic1"}, Pairs: []Pair{paired(0, "nic0", pix), paired(1, "nic1", pix)}}},
		{"two GPUs per switch, one of its NICs taken: the other GPU goes to the next switch", roce,
			Request{Available: except(ids(roce), "nic0"), Size: 2}, twoBeside,
			Alignment{NICs: []string{"nic1", "nic2"}, Pairs: []Pair{paired(0, "nic1", pix), paired(1, "nic2", phb)}}},
		{"mixed link layers: InfiniBand PIX+PHB beats Ethernet PIX+SYS", with(roce, mixedLayers),
			Request{Available: ids(roce), Size: 2}, twoBeside,
			Alignment{NICs: []string{"nic0", "nic2"}, Pairs: []Pair{paired(0, "nic0", pix), paired(1, "nic2", phb)}}},
		{"mixed link layers: one layer at PIX+SYS beats a mixed PIX+PIX", with(roce, mixedLayers),
			Request{Available: []string{"nic0", "nic1", "nic5"}, Size: 2}, twoBeside,
			Alignment{NICs: []string{"nic1", "nic5"}, Pairs: []Pair{paired(0, "nic1", pix), paired(1, "nic5", sys)}}},
		{"mixed link layers: no layer can fill the size, mixed set", with(roce, mixedLayers),
			Request{Available: []string{"nic0", "nic1", "nic6"}, Size: 3}, twoBeside,
			Alignment{NICs: []string{"nic0", "nic1", "nic6"}, Pairs: []Pair{paired(0, "nic0", pix), paired(1, "nic1", pix)}}},
		{"no GPUs: a compact set", roce,
			Request{Available: []string{"nic0", "nic2", "nic3"}, Size: 2}, nil,
			Alignment{NICs: []string{"nic2", "nic3"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AlignToGPUs(tt.topo, tt.req, tt.gpus)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
			// Reversed devices, free NICs and GPUs: the same answer.
			topo, req := tt.topo, tt.req
			topo.Devices = slices.Clone(topo.Devices)
			slices.Reverse(topo.Devices)
			req.Available = slices.Clone(req.Available)
			slices.Reverse(req.Available)
			gpus := slices.Clone(tt.gpus)
			slices.Reverse(gpus)
			again, err := AlignToGPUs(topo, req, gpus)
			if err != nil {
				t.Fatal(err)
			}
			slices.Reverse(again.Pairs)
			for i := range again.Pairs {
				again.Pairs[i].GPU = i
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("reversed input changed the answer (-first +reversed)\n%s", diff)
			}
		})
	}
}

// TestAlignToGPUsPodSequence binds NICs to pods arriving on and leaving an
// HGX node: each gets the best level the free NICs still allow, and no NIC
// is bound twice.
func TestAlignToGPUsPodSequence(t *testing.T) {
	topo, gpus := h100Node(false)
	free := computeNICs()
	bound := map[string][]string{}
	steps := []struct {
		pod    string
		gpus   []int // nil: the pod leaves
		size   int
		levels []discovery.Level
		nics   []string
	}{
		{pod: "a", gpus: []int{0, 1}, size: 2, levels: []discovery.Level{discovery.PIX, discovery.PIX}, nics: []string{"mlx5_0", "mlx5_3"}},
		{pod: "b", gpus: []int{2}, size: 2, levels: []discovery.Level{discovery.PIX}, nics: []string{"mlx5_4", "mlx5_5"}},
		{pod: "c", gpus: []int{3, 4}, size: 2, levels: []discovery.Level{discovery.SYS, discovery.PIX}, nics: []string{"mlx5_10", "mlx5_6"}},
		{pod: "a"},
		{pod: "d", gpus: []int{5, 0, 1}, size: 3, levels: []discovery.Level{discovery.PIX, discovery.PIX, discovery.PIX},
			nics: []string{"mlx5_0", "mlx5_3", "mlx5_9"}},
		{pod: "e", gpus: []int{6, 7}, size: 1, levels: []discovery.Level{"", discovery.PIX}, nics: []string{"mlx5_11"}},
	}
	for _, s := range steps {
		if s.gpus == nil {
			free = append(free, bound[s.pod]...)
			delete(bound, s.pod)
			continue
		}
		got, err := AlignToGPUs(topo, Request{Available: free, Size: s.size}, gpusAt(gpus, s.gpus...))
		if err != nil {
			t.Fatalf("pod %s: %v", s.pod, err)
		}
		var levels []discovery.Level
		for _, p := range got.Pairs {
			levels = append(levels, p.Level)
		}
		if diff := cmp.Diff(s.levels, levels); diff != "" {
			t.Errorf("pod %s levels (-want +got)\n%s", s.pod, diff)
		}
		if diff := cmp.Diff(s.nics, got.NICs); diff != "" {
			t.Errorf("pod %s NICs (-want +got)\n%s", s.pod, diff)
		}
		for _, n := range got.NICs {
			for other, nics := range bound {
				if slices.Contains(nics, n) {
					t.Errorf("pod %s got %s, already bound to pod %s", s.pod, n, other)
				}
			}
		}
		bound[s.pod] = got.NICs
		free = except(free, got.NICs...)
	}
}

func TestAlignToGPUsErrors(t *testing.T) {
	roce := cloudRoCE()
	gpu := []discovery.Location{besideNIC(0, "0000:ff:00.0")}
	tests := []struct {
		name string
		topo Topology
		req  Request
		gpus []discovery.Location
		want error
	}{
		{"unknown available", roce, Request{Available: []string{"nic0", "nic9"}, Size: 1}, gpu, ErrUnknownDevice},
		{"must not available", roce, Request{Available: []string{"nic0"}, MustInclude: []string{"nic1"}, Size: 1}, gpu, ErrBadRequest},
		{"zero size", roce, Request{Available: []string{"nic0"}}, gpu, ErrBadRequest},
		{"too many", roce, Request{Available: []string{"nic0"}, Size: 2}, gpu, ErrBadRequest},
		{"not enough healthy", with(roce, nil, "nic1"), Request{Available: []string{"nic0", "nic1"}, Size: 2}, gpu, ErrBadRequest},
		{"too many gpus", roce, Request{Available: []string{"nic0"}, Size: 1}, make([]discovery.Location, maxAlign+1), ErrBadRequest},
		{"no gpus, unknown device", roce, Request{Available: []string{"nic9"}, Size: 1}, nil, ErrUnknownDevice},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := AlignToGPUs(tt.topo, tt.req, tt.gpus); !errors.Is(err, tt.want) {
				t.Errorf("got %+v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestAlignmentJSON pins the recorded form of an alignment (node state,
// kubectl rdma pods read it).
func TestAlignmentJSON(t *testing.T) {
	topo, gpus := fourGPUServer()
	a, err := AlignToGPUs(topo, Request{Available: ids(topo), Size: 1}, gpusAt(gpus, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"nics":["mlx5_0"],"pairs":[{"gpu":0},{"gpu":1,"nic":"mlx5_0","level":"PIX"}]}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
	var back Alignment
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, back); diff != "" {
		t.Errorf("round trip (-before +after)\n%s", diff)
	}
	if got := a.Within(discovery.PXB); got != 1 {
		t.Errorf("Within(PXB) = %d, want 1", got)
	}
}
