package allocator

// This file replays random pod sequences on the golden GPU nodes and scores
// three ways of choosing a pod's NICs: AlignToGPUs; random NICs
// on the NUMA nodes of the pod's GPUs (what the kubelet's Topology Manager
// gives today); for each GPU a random NIC under the same PCIe root complex
// (what DRA's resource.kubernetes.io/pcieRoot constraint gives).
//
// The model, stated once:
//
//   - Pods arrive needing g GPUs, g drawn uniformly from 1..8 and cut to the
//     free GPUs, and min(g, free NICs) NICs (so g on the nodes with a NIC per
//     GPU, fewer on the four-GPU server with two NICs); a live pod leaves
//     with probability 1/2 at each step, and always when no GPU is free.
//   - GPUs are chosen as the kubelet with the Topology Manager (best-effort)
//     and NVIDIA's device plugin would on an NVSwitch node, where every GPU
//     pair is equal to the plugin: the lowest NUMA node whose free GPUs can
//     hold the pod, its free GPUs in index order; when no NUMA node can, the
//     free GPUs in index order. This is a model, not the kubelet's code.
//   - The pod/GPU sequence (the trace) depends only on the seed, never on
//     the NIC policy: it is drawn once and every policy replays the same one.
//     Each policy keeps its own free NICs and its own random source.
//   - A pod's pairs are min(g, NICs). For AlignToGPUs they are scored by the
//     pairing it returns; the other two are credited with the best pairing
//     of the NICs they got (as if NCCL paired them perfectly), which can only
//     flatter them.
//   - The best achievable for a pod, from the NICs free for that policy at
//     that moment, is the maximum matching between its GPUs and those NICs
//     over PIX edges, and separately over PXB-or-closer edges (augmenting
//     paths, checked against exhaustive search in TestMaxPairs; it does not
//     use AlignToGPUs).

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// replayNode is a node for the replay: the topology, the NICs of the pool
// and the GPUs.
type replayNode struct {
	name string
	topo Topology
	pool []string
	gpus []discovery.Location
}

// replayNodes are the nodes of the replay; the four-GPU
// server twice: as in the golden tests (two NICs) and with a NIC on every
// GPU's root complex.
func replayNodes() []replayNode {
	hgx, hgxGPUs := h100Node(false)
	dgx, dgxGPUs := h100Node(true)
	roce := cloudRoCE()
	var roceGPUs []discovery.Location // GPU i beside NIC i: two GPUs, two NICs per switch
	for i := range roce.Devices {
		roceGPUs = append(roceGPUs, besideNIC(i, fmt.Sprintf("0000:f%d:00.0", i)))
	}
	four, fourGPUs := fourGPUServer()
	four4 := fourGPUFourNICs()
	return []replayNode{
		{"hgx-pix", hgx, computeNICs(), hgxGPUs},
		{"dgx-h100-pxb", dgx, computeNICs(), dgxGPUs},
		{"two-per-switch", roce, ids(roce), roceGPUs},
		{"four-gpu-two-nics", four, ids(four), fourGPUs},
		{"four-gpu-root-not-switch", four4, ids(four4), fourGPUs},
	}
}

// fourGPUFourNICs is fourGPUServer with a NIC on every GPU's root complex:
// mlx5_2 on a root port of its own next to GPUs 0 and 1 (PHB to both),
// mlx5_3 on GPU 3's host bridge (PHB). Every GPU is aligned with a NIC by
// root complex, yet only GPU 0 shares a switch with one (mlx5_0).
func fourGPUFourNICs() Topology {
	topo, _ := fourGPUServer()
	topo.Devices = append(slices.Clone(topo.Devices),
		Device{ID: "mlx5_2", LinkLayer: eth, Location: loc(0, "pci0000:00", "0000:00:02.0", "0000:03:00.0")},
		Device{ID: "mlx5_3", LinkLayer: eth, Location: loc(1, "pci0000:c0", "0000:c0:02.0", "0000:c2:00.0")})
	return topo
}

// event is one step of a trace: a pod arrives (gpus set) or leaves.
type event struct {
	pod  int
	gpus []int // indexes into replayNode.gpus; nil when the pod leaves
	nics int   // NICs the arriving pod asks for
}

// podTrace draws steps events on node from seed (see the file comment).
func podTrace(seed uint64, node replayNode, steps int) []event {
	rng := rand.New(rand.NewPCG(seed, 0))
	used := make([]bool, len(node.gpus))
	freeNICs := len(node.pool)
	live := map[int]event{}
	var order []int // live pods in arrival order, for a deterministic pick
	var trace []event
	next := 0
	for range steps {
		freeGPUs := 0
		for _, u := range used {
			if !u {
				freeGPUs++
			}
		}
		if len(order) > 0 && (freeGPUs == 0 || rng.IntN(2) == 0) {
			k := rng.IntN(len(order))
			e := live[order[k]]
			for _, g := range e.gpus {
				used[g] = false
			}
			freeNICs += e.nics
			delete(live, e.pod)
			order = slices.Delete(order, k, k+1)
			trace = append(trace, event{pod: e.pod})
			continue
		}
		g := min(1+rng.IntN(8), freeGPUs)
		e := event{pod: next, gpus: kubeletGPUs(node, used, g), nics: min(g, freeNICs)}
		next++
		for _, i := range e.gpus {
			used[i] = true
		}
		freeNICs -= e.nics
		live[e.pod] = e
		order = append(order, e.pod)
		trace = append(trace, e)
	}
	return trace
}

// kubeletGPUs picks g free GPUs: the lowest NUMA node that can hold them
// all, lowest indexes first; else the lowest free indexes on the node.
func kubeletGPUs(node replayNode, used []bool, g int) []int {
	var numas []int
	for _, l := range node.gpus {
		if !slices.Contains(numas, l.NUMANode) {
			numas = append(numas, l.NUMANode)
		}
	}
	slices.Sort(numas)
	free := func(numa int, any bool) []int {
		var out []int
		for i, l := range node.gpus {
			if !used[i] && (any || l.NUMANode == numa) {
				out = append(out, i)
			}
		}
		return out
	}
	for _, n := range numas {
		if f := free(n, false); len(f) >= g {
			return f[:g]
		}
	}
	return free(0, true)[:g]
}

// replayPolicy chooses n NICs out of free (in pool order) for a pod's
// GPUs. It returns its own pairing when it makes one; nil pairs are
// credited with the best pairing of the NICs.
type replayPolicy struct {
	name string
	pick func(rng *rand.Rand, node replayNode, free []string, gpus []discovery.Location, n int) ([]string, []Pair, error)
}

var replayPolicies = []replayPolicy{
	{"ours (AlignToGPUs)", pickOurs},
	{"numa-aligned random", pickNUMARandom},
	{"root-complex match", pickRootComplex},
}

func pickOurs(_ *rand.Rand, node replayNode, free []string, gpus []discovery.Location, n int) ([]string, []Pair, error) {
	a, err := AlignToGPUs(node.topo, Request{Available: free, Size: n}, gpus)
	return a.NICs, a.Pairs, err
}

// pickNUMARandom takes random free NICs on the NUMA nodes of the pod's
// GPUs, then random free NICs anywhere.
func pickNUMARandom(rng *rand.Rand, node replayNode, free []string, gpus []discovery.Location, n int) ([]string, []Pair, error) {
	var near, far []string
	for _, id := range free {
		numa := nicLocation(node.topo, id).NUMANode
		if slices.ContainsFunc(gpus, func(g discovery.Location) bool { return g.NUMANode == numa }) {
			near = append(near, id)
		} else {
			far = append(far, id)
		}
	}
	rng.Shuffle(len(near), func(i, j int) { near[i], near[j] = near[j], near[i] })
	rng.Shuffle(len(far), func(i, j int) { far[i], far[j] = far[j], far[i] })
	return append(near, far...)[:n], nil, nil
}

// pickRootComplex gives each GPU in turn a random free NIC with its PCIe
// root, while NICs are still wanted, then the GPUs left without one random
// free NICs. It is credited with the best pairing of the NICs it got, not
// with this one, which can only flatter it.
func pickRootComplex(rng *rand.Rand, node replayNode, free []string, gpus []discovery.Location, n int) ([]string, []Pair, error) {
	free = slices.Clone(free)
	take := func(k int) string {
		id := free[k]
		free = slices.Delete(free, k, k+1)
		return id
	}
	var nics []string
	served := make([]bool, len(gpus))
	for i, g := range gpus {
		var same []int
		for k, id := range free {
			if nicLocation(node.topo, id).PCIeRoot == g.PCIeRoot {
				same = append(same, k)
			}
		}
		if len(nics) < n && len(same) > 0 {
			nics = append(nics, take(same[rng.IntN(len(same))]))
			served[i] = true
		}
	}
	for i := range gpus {
		if len(nics) < n && !served[i] {
			nics = append(nics, take(rng.IntN(len(free))))
		}
	}
	return nics, nil, nil
}

func nicLocation(t Topology, id string) discovery.Location {
	for _, d := range t.Devices {
		if d.ID == id {
			return d.Location
		}
	}
	panic("unknown NIC " + id)
}

// maxPairs is the most GPUs that can each get a distinct NIC out of nics
// at level l or closer: a maximum bipartite matching by augmenting paths.
func maxPairs(t Topology, gpus []discovery.Location, nics []string, l discovery.Level) int {
	ok := make([][]bool, len(gpus))
	for i, g := range gpus {
		ok[i] = make([]bool, len(nics))
		for j, id := range nics {
			ok[i][j] = discovery.Distance(g, nicLocation(t, id), t.NUMANodes).Rank() <= l.Rank()
		}
	}
	owner := make([]int, len(nics)) // NIC -> GPU, -1 free
	for j := range owner {
		owner[j] = -1
	}
	var seen []bool
	var augment func(i int) bool
	augment = func(i int) bool {
		for j := range nics {
			if ok[i][j] && !seen[j] {
				seen[j] = true
				if owner[j] < 0 || augment(owner[j]) {
					owner[j] = i
					return true
				}
			}
		}
		return false
	}
	n := 0
	for i := range gpus {
		seen = make([]bool, len(nics))
		if augment(i) {
			n++
		}
	}
	return n
}

// podScore is one pod's pairs for one policy and the best it could have had.
type podScore struct {
	pod, pairs, pix, pxb int
	bestPIX, bestPXB     int
}

// replay runs trace on node with policy p. It fails when the policy binds
// a NIC twice, one outside the pool, or the wrong number.
func replay(node replayNode, trace []event, p replayPolicy, rng *rand.Rand) ([]podScore, error) {
	owner := map[string]int{}
	bound := map[int][]string{}
	var out []podScore
	for _, e := range trace {
		if e.gpus == nil {
			for _, id := range bound[e.pod] {
				delete(owner, id)
			}
			delete(bound, e.pod)
			continue
		}
		if e.nics == 0 {
			continue
		}
		var free []string
		for _, id := range node.pool {
			if _, taken := owner[id]; !taken {
				free = append(free, id)
			}
		}
		gpus := gpusAt(node.gpus, e.gpus...)
		nics, pairs, err := p.pick(rng, node, free, gpus, e.nics)
		if err != nil {
			return nil, fmt.Errorf("pod %d: %w", e.pod, err)
		}
		if len(nics) != e.nics {
			return nil, fmt.Errorf("pod %d: got %d NICs %v, asked for %d", e.pod, len(nics), nics, e.nics)
		}
		for _, id := range nics {
			if other, taken := owner[id]; taken {
				return nil, fmt.Errorf("pod %d: NIC %s already bound to pod %d", e.pod, id, other)
			}
			if !slices.Contains(node.pool, id) {
				return nil, fmt.Errorf("pod %d: NIC %s is not in the pool", e.pod, id)
			}
			owner[id] = e.pod
		}
		bound[e.pod] = nics
		s := podScore{pod: e.pod, pairs: min(len(gpus), e.nics),
			bestPIX: min(e.nics, maxPairs(node.topo, gpus, free, discovery.PIX)),
			bestPXB: min(e.nics, maxPairs(node.topo, gpus, free, discovery.PXB))}
		if pairs != nil {
			a := Alignment{Pairs: pairs}
			s.pix, s.pxb = a.Within(discovery.PIX), a.Within(discovery.PXB)
		} else {
			s.pix, s.pxb = maxPairs(node.topo, gpus, nics, discovery.PIX), maxPairs(node.topo, gpus, nics, discovery.PXB)
		}
		out = append(out, s)
	}
	return out, nil
}

// replayAll replays one trace with every policy, each with its own random
// source from seed.
func replayAll(node replayNode, trace []event, seed uint64) ([][]podScore, error) {
	out := make([][]podScore, len(replayPolicies))
	for i, p := range replayPolicies {
		s, err := replay(node, trace, p, rand.New(rand.NewPCG(seed, uint64(i+1))))
		if err != nil {
			return nil, fmt.Errorf("%s on %s: %w", p.name, node.name, err)
		}
		out[i] = s
	}
	return out, nil
}

// replayTotal sums a policy's pod scores.
func replayTotal(scores []podScore) (t podScore) {
	for _, s := range scores {
		t.pairs += s.pairs
		t.pix += s.pix
		t.pxb += s.pxb
		t.bestPIX += s.bestPIX
		t.bestPXB += s.bestPXB
	}
	return t
}

func pct(a, b int) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}
