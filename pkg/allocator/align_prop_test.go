package allocator

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// randomNode builds a node with nGPU GPUs and nNIC NICs spread over three
// host bridges on two NUMA nodes, two root ports each, with switches and
// nested switches, so every level occurs; NICs get random link layers and
// some are unhealthy.
func randomNode(rng *rand.Rand, nGPU, nNIC int) (Topology, []discovery.Location) {
	place := func(name string) discovery.Location {
		root := rng.IntN(3)
		numa := []int{0, 0, 1}[root]
		if rng.IntN(20) == 0 {
			numa = -1
		}
		r := fmt.Sprintf("pci0000:%d0", root)
		path := []string{fmt.Sprintf("%d0:0%d.0", root, rng.IntN(2))}
		if rng.IntN(4) > 0 {
			path = append(path, fmt.Sprintf("%s-sw%d", path[0], rng.IntN(2)))
			if rng.IntN(3) == 0 {
				path = append(path, path[1]+"-sub")
			}
		}
		return loc(numa, r, append(path, name)...)
	}
	topo := Topology{NUMANodes: 2}
	for i := range nNIC {
		topo.Devices = append(topo.Devices, Device{
			ID:        fmt.Sprintf("nic%d", i),
			Location:  place(fmt.Sprintf("nic%d", i)),
			LinkLayer: []string{"", ib, eth, ib}[rng.IntN(4)],
			Unhealthy: rng.IntN(6) == 0,
		})
	}
	var gpus []discovery.Location
	for i := range nGPU {
		gpus = append(gpus, place(fmt.Sprintf("gpu%d", i)))
	}
	return topo, gpus
}

// randomRequest draws a request on topo: some NICs free, a size, maybe
// forced NICs.
func randomRequest(rng *rand.Rand, topo Topology) Request {
	var r Request
	for _, d := range topo.Devices {
		if rng.IntN(5) > 0 {
			r.Available = append(r.Available, d.ID)
		}
	}
	if len(r.Available) == 0 {
		r.Available = []string{topo.Devices[0].ID}
	}
	r.Size = 1 + rng.IntN(len(r.Available))
	for _, id := range r.Available {
		if len(r.MustInclude) < r.Size && rng.IntN(8) == 0 {
			r.MustInclude = append(r.MustInclude, id)
		}
	}
	return r
}

// bruteAlign is AlignToGPUs by exhaustive search, written from the
// documented rules rather than from the algorithm: every set of Size
// healthy-or-forced NICs holding MustInclude, single-layer sets only if
// any exists, every pairing; the best by the documented order.
func bruteAlign(topo Topology, r Request, gpus []discovery.Location) (Alignment, error) {
	byID := map[string]Device{}
	for _, d := range topo.Devices {
		byID[d.ID] = d
	}
	var pool []Device
	for _, id := range r.Available {
		if d := byID[id]; !d.Unhealthy || slices.Contains(r.MustInclude, id) {
			pool = append(pool, d)
		}
	}
	slices.SortFunc(pool, func(a, b Device) int { return cmp.Compare(a.ID, b.ID) })
	if len(pool) < r.Size {
		return Alignment{}, ErrBadRequest
	}
	order := make([]int, len(gpus))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		la, lb := gpus[a], gpus[b]
		return cmp.Or(cmp.Compare(la.PCIeRoot, lb.PCIeRoot), slices.Compare(la.PCIPath, lb.PCIPath),
			cmp.Compare(la.NUMANode, lb.NUMANode))
	})
	rank := func(g int, d Device) int { return discovery.Distance(gpus[g], d.Location, topo.NUMANodes).Rank() }

	var sets [][]Device
	for mask := range 1 << len(pool) {
		var set []Device
		for i, d := range pool {
			if mask&(1<<i) != 0 {
				set = append(set, d)
			}
		}
		if len(set) != r.Size {
			continue
		}
		ok := true
		for _, m := range r.MustInclude {
			ok = ok && slices.ContainsFunc(set, func(d Device) bool { return d.ID == m })
		}
		if ok {
			sets = append(sets, set)
		}
	}
	single := func(set []Device) bool {
		layer := ""
		for _, d := range set {
			if d.LinkLayer != "" && layer != "" && d.LinkLayer != layer {
				return false
			}
			layer = cmp.Or(d.LinkLayer, layer)
		}
		return true
	}
	if slices.ContainsFunc(sets, single) {
		sets = slices.DeleteFunc(sets, func(s []Device) bool { return !single(s) })
	}

	type scored struct {
		pairs, extras [6]int // counts per rank, as negative numbers (lower is better)
		sum           int
		ids           []string
		seq           []string // NIC per GPU in canonical order, "\xff" for none
		set           []Device
		nic           []int // canonical position -> index into set, -1
	}
	better := func(a, b *scored) bool {
		return cmp.Or(slices.Compare(a.pairs[:], b.pairs[:]), slices.Compare(a.extras[:], b.extras[:]),
			cmp.Compare(a.sum, b.sum), slices.Compare(a.ids, b.ids), slices.Compare(a.seq, b.seq)) < 0
	}
	var best *scored
	want := min(len(gpus), r.Size)
	for _, set := range sets {
		nic := make([]int, len(gpus))
		used := make([]bool, len(set))
		var walk func(k, paired int)
		walk = func(k, paired int) {
			if k == len(gpus) {
				if paired != want {
					return
				}
				s := &scored{set: set, nic: slices.Clone(nic)}
				for i, j := range nic {
					if j < 0 {
						s.seq = append(s.seq, "\xff")
						continue
					}
					s.pairs[rank(order[i], set[j])]--
					s.seq = append(s.seq, set[j].ID)
				}
				for j, d := range set {
					s.ids = append(s.ids, d.ID)
					if used[j] {
						continue
					}
					nearest := 5
					for g := range gpus {
						nearest = min(nearest, rank(g, d))
						s.sum += rank(g, d)
					}
					s.extras[nearest]--
				}
				if best == nil || better(s, best) {
					best = s
				}
				return
			}
			nic[k] = -1
			walk(k+1, paired)
			for j := range set {
				if !used[j] {
					used[j], nic[k] = true, j
					walk(k+1, paired+1)
					used[j] = false
				}
			}
		}
		walk(0, 0)
	}
	out := Alignment{Pairs: make([]Pair, len(gpus))}
	for _, d := range best.set {
		out.NICs = append(out.NICs, d.ID)
	}
	for k, g := range order {
		out.Pairs[g] = Pair{GPU: g}
		if j := best.nic[k]; j >= 0 {
			out.Pairs[g].NIC = best.set[j].ID
			out.Pairs[g].Level = discovery.Distance(gpus[g], best.set[j].Location, topo.NUMANodes)
		}
	}
	return out, nil
}

// TestAlignToGPUsMatchesBruteForce compares AlignToGPUs with exhaustive
// search on random small nodes (up to 5 GPUs and 6 NICs).
func TestAlignToGPUsMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026))
	iterations := 10000
	if testing.Short() {
		iterations = 1000
	}
	for iter := range iterations {
		topo, gpus := randomNode(rng, 1+rng.IntN(5), 1+rng.IntN(6))
		req := randomRequest(rng, topo)
		got, err := AlignToGPUs(topo, req, gpus)
		want, werr := bruteAlign(topo, req, gpus)
		if werr != nil || err != nil {
			if !errors.Is(err, ErrBadRequest) || !errors.Is(werr, ErrBadRequest) {
				t.Fatalf("iteration %d: got error %v, brute force %v", iter, err, werr)
			}
			continue
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Fatalf("iteration %d: %d gpus %v\ndevices %+v\nrequest %+v\n(-brute +got)\n%s",
				iter, len(gpus), gpus, topo.Devices, req, diff)
		}
	}
}

// TestAlignToGPUsInputOrder shuffles the devices, the free and forced
// NICs and the GPUs (all at distinct places) and expects the same NICs,
// each GPU keeping its NIC.
func TestAlignToGPUsInputOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for iter := range 500 {
		topo, gpus := randomNode(rng, 1+rng.IntN(8), 1+rng.IntN(12))
		req := randomRequest(rng, topo)
		first, err := AlignToGPUs(topo, req, gpus)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatal(err)
			}
			continue
		}
		for range 5 {
			st := topo
			st.Devices = slices.Clone(topo.Devices)
			rng.Shuffle(len(st.Devices), func(i, j int) { st.Devices[i], st.Devices[j] = st.Devices[j], st.Devices[i] })
			sr := req
			sr.Available = slices.Clone(req.Available)
			sr.MustInclude = slices.Clone(req.MustInclude)
			rng.Shuffle(len(sr.Available), func(i, j int) { sr.Available[i], sr.Available[j] = sr.Available[j], sr.Available[i] })
			rng.Shuffle(len(sr.MustInclude), func(i, j int) { sr.MustInclude[i], sr.MustInclude[j] = sr.MustInclude[j], sr.MustInclude[i] })
			perm := rng.Perm(len(gpus)) // shuffled position -> original index
			sg := make([]discovery.Location, len(gpus))
			for i, g := range perm {
				sg[i] = gpus[g]
			}
			again, err := AlignToGPUs(st, sr, sg)
			if err != nil {
				t.Fatal(err)
			}
			back := Alignment{NICs: again.NICs, Pairs: make([]Pair, len(gpus))}
			for i, p := range again.Pairs {
				p.GPU = perm[i]
				back.Pairs[perm[i]] = p
			}
			if diff := gocmp.Diff(first, back); diff != "" {
				t.Fatalf("iteration %d: shuffled input changed the answer (-first +shuffled)\n%s", iter, diff)
			}
		}
	}
}

// benchNode is an HGX-like node scaled up: nGPU GPUs and nNIC NICs, one
// GPU and up to a few NICs under each PCIe switch, two per host bridge,
// half the host bridges on each NUMA node.
func benchNode(nGPU, nNIC int) (Topology, []discovery.Location) {
	topo := Topology{NUMANodes: 2}
	at := func(i int, name string) discovery.Location {
		sw := i % nGPU
		root := fmt.Sprintf("pci0000:%02x", sw/2)
		return loc(2*sw/nGPU, root, root[8:]+":01.0", fmt.Sprintf("sw%d", sw), fmt.Sprintf("sw%d-%s", sw, name), name)
	}
	for i := range nNIC {
		id := fmt.Sprintf("mlx5_%02d", i)
		topo.Devices = append(topo.Devices, Device{ID: id, Location: at(i, id), LinkLayer: ib})
	}
	var gpus []discovery.Location
	for i := range nGPU {
		gpus = append(gpus, at(i, fmt.Sprintf("gpu%02d", i)))
	}
	return topo, gpus
}

func benchmarkAlign(b *testing.B, nGPU, nNIC int) {
	topo, gpus := benchNode(nGPU, nNIC)
	req := Request{Available: ids(topo), Size: nGPU}
	for b.Loop() {
		if _, err := AlignToGPUs(topo, req, gpus); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAlignToGPUs8x8(b *testing.B)   { benchmarkAlign(b, 8, 8) }
func BenchmarkAlignToGPUs16x32(b *testing.B) { benchmarkAlign(b, 16, 32) }
