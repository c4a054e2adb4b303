package allocator

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Pair is what one of a pod's GPUs got from AlignToGPUs.
type Pair struct {
	// GPU is the GPU's index in the list given to AlignToGPUs.
	GPU int `json:"gpu"`
	// NIC is the ID of the NIC paired with this GPU, "" when the GPU got
	// none (the pod asked for fewer NICs than it has GPUs).
	NIC string `json:"nic,omitempty"`
	// Level is the PCIe distance between the GPU and its NIC, "" without a
	// NIC.
	Level discovery.Level `json:"level,omitempty"`
}

// Alignment is the NICs a pod gets and which of its GPUs each serves.
type Alignment struct {
	// NICs are all the NICs chosen, sorted.
	NICs []string `json:"nics"`
	// Pairs has one entry per GPU, in the order the GPUs were given. NICs
	// that serve no GPU (Size > number of GPUs) are in NICs only.
	Pairs []Pair `json:"pairs,omitempty"`
}

// Within counts the GPUs paired with a NIC at level l or closer.
func (a Alignment) Within(l discovery.Level) int {
	n := 0
	for _, p := range a.Pairs {
		if p.NIC != "" && p.Level.Rank() <= l.Rank() {
			n++
		}
	}
	return n
}

// maxAlign bounds the GPUs and the Size of one AlignToGPUs call, so that
// the packed cost components cannot overflow (see alignCosts) and the
// worst case (256 GPUs, 256 NICs, all at one level) stays under a second;
// nodes have a few dozen at most.
const maxAlign = 256

// AlignToGPUs picks r.Size NICs out of r.Available for a pod with the
// given GPUs and pairs each NIC with a distinct GPU, as many pairs as
// possible (min(len(gpus), r.Size)). Candidates are narrowed as for
// Closest (package doc: unhealthy devices left out, one link layer per
// set, MustInclude always in). Among the sets and pairings left it is
// exact, ranking them by, in order:
//
//  1. the pairs' levels, lexicographically: the most pairs at PIX, then
//     the most at PXB or better, then PHB, NODE, SYS. So a PXB pair and a
//     SYS pair beat two PHB pairs: NCCL uses GPUDirect RDMA only at PXB
//     or better, and one pair that can is worth more than two that cannot;
//  2. the NICs that serve no GPU (Size > len(gpus)): the most whose
//     nearest GPU is at PIX, then at PXB or better, and so on, then the
//     smallest sum of their levels' ranks to all GPUs;
//  3. the chosen NIC IDs, sorted and compared as lists of strings
//     (byte-wise): the smallest list wins;
//  4. the pairing: GPUs taken in a canonical order (by PCIe root, then
//     PCI path, then NUMA node, then their index in gpus), each gets the
//     smallest NIC ID it can, GPUs without a NIC last.
//
// When no single link layer can fill Size, the sets may mix layers, as for
// Closest. The result does not depend on the order of t.Devices,
// r.Available or r.MustInclude, and only through rule 4 (GPUs at the very
// same place) on the order of gpus. Without GPUs the NICs are Closest's.
func AlignToGPUs(t Topology, r Request, gpus []discovery.Location) (Alignment, error) {
	if len(gpus) == 0 {
		nics, err := Closest(t, r)
		if err != nil {
			return Alignment{}, err
		}
		return Alignment{NICs: nics}, nil
	}
	if len(gpus) > maxAlign || r.Size > maxAlign {
		return Alignment{}, fmt.Errorf("%w: %d gpus, size %d, at most %d each", ErrBadRequest, len(gpus), r.Size, maxAlign)
	}
	p, err := resolve(t, r)
	if err != nil {
		return Alignment{}, err
	}
	groups, err := candidates(p)
	if err != nil {
		return Alignment{}, err
	}
	ap := newAlignProblem(p, gpus)
	var best *aligned
	for _, g := range groups {
		if len(g) < p.size {
			continue
		}
		if a := ap.solve(g); best == nil || a.compare(best) < 0 {
			best = a
		}
	}
	if best == nil {
		// No single link layer can fill the request: mix them.
		best = ap.solve(healthy(p))
	}
	return ap.result(best), nil
}

// alignProblem is a resolved request with the GPUs in canonical order and
// each GPU's distance rank to each device.
type alignProblem struct {
	p     *problem
	gpus  []discovery.Location
	order []int   // canonical position -> index in gpus
	rank  [][]int // canonical position -> device -> rank
	must  []bool  // device -> in MustInclude
}

func newAlignProblem(p *problem, gpus []discovery.Location) *alignProblem {
	ap := &alignProblem{p: p, gpus: gpus, must: make([]bool, len(p.devs))}
	for _, d := range p.must {
		ap.must[d] = true
	}
	ap.order = make([]int, len(gpus))
	for i := range ap.order {
		ap.order[i] = i
	}
	slices.SortStableFunc(ap.order, func(a, b int) int {
		la, lb := gpus[a], gpus[b]
		return cmp.Or(cmp.Compare(la.PCIeRoot, lb.PCIeRoot), slices.Compare(la.PCIPath, lb.PCIPath),
			cmp.Compare(la.NUMANode, lb.NUMANode))
	})
	ap.rank = make([][]int, len(gpus))
	for k, g := range ap.order {
		ap.rank[k] = make([]int, len(p.devs))
		for d, dev := range p.devs {
			ap.rank[k][d] = discovery.Distance(gpus[g], dev.Location, p.numa).Rank()
		}
	}
	return ap
}

// aligned is the best answer within one candidate set.
type aligned struct {
	cost cost
	nics []int // device indexes, ascending (so in ID order)
	nic  []int // canonical GPU position -> device index, -1 for none
}

func (a *aligned) compare(b *aligned) int {
	if a.cost != b.cost {
		if a.cost.less(b.cost) {
			return -1
		}
		return 1
	}
	return slices.Compare(a.nics, b.nics)
}

// alignCosts builds the cost matrix for drawing from cand (device indexes,
// ascending). Rows are the GPUs in canonical order, then Size-len(gpus)
// free slots (NICs that serve no GPU); columns are the candidates in ID
// order, then len(gpus)-Size "no NIC" columns. Components, most important
// first:
//
//	0: -1 for a "no NIC" column, so that exactly Size NICs are taken;
//	1: +1 for a NIC not in MustInclude, so every forced NIC is taken;
//	2: for a GPU row, -base^(5-rank): a profile whose lexicographic order
//	   is that of (pairs at rank 0, at rank 1, ...), base exceeding any count;
//	3: the same for a free slot, with the NIC's rank to its nearest GPU;
//	4: for a free slot, the sum of the NIC's ranks to all GPUs.
//
// Ranks run 0..5 (5 for a level Distance does not produce) and counts stay
// below base = rows+1 <= maxAlign+1, so every component, and every
// potential the solver derives from them, stays below rows*base^5 < 2^49.
func (ap *alignProblem) alignCosts(cand []int) (rows, cols int, c []cost) {
	g, size := len(ap.gpus), ap.p.size
	rows = max(g, size)
	cols = len(cand) + max(0, g-size)
	base := int64(rows + 1)
	profile := func(rank int) int64 {
		w := int64(1)
		for range len(discovery.Levels) - min(rank, len(discovery.Levels)) {
			w *= base
		}
		return -w
	}
	c = make([]cost, rows*cols)
	for i := range rows {
		for j := range cols {
			var x cost
			switch {
			case j >= len(cand):
				x[0] = -1
			default:
				d := cand[j]
				if !ap.must[d] {
					x[1] = 1
				}
				if i < g {
					x[2] = profile(ap.rank[i][d])
					break
				}
				nearest, sum := len(discovery.Levels), 0
				for k := range g {
					nearest = min(nearest, ap.rank[k][d])
					sum += ap.rank[k][d]
				}
				x[3], x[4] = profile(nearest), int64(sum)
			}
			c[i*cols+j] = x
		}
	}
	return rows, cols, c
}

// solve finds the best set and pairing drawn from cand.
func (ap *alignProblem) solve(cand []int) *aligned {
	rows, cols, c := ap.alignCosts(cand)
	a := solve(rows, cols, c)
	a.canonical()
	out := &aligned{cost: a.total(), nic: make([]int, len(ap.gpus))}
	for i, j := range a.col {
		d := -1
		if j < len(cand) {
			d = cand[j]
			out.nics = append(out.nics, d)
		}
		if i < len(ap.gpus) {
			out.nic[i] = d
		}
	}
	slices.Sort(out.nics)
	return out
}

func (ap *alignProblem) result(a *aligned) Alignment {
	out := Alignment{Pairs: make([]Pair, len(ap.gpus))}
	for _, d := range a.nics {
		out.NICs = append(out.NICs, ap.p.devs[d].ID)
	}
	for k, g := range ap.order {
		out.Pairs[g] = Pair{GPU: g}
		if d := a.nic[k]; d >= 0 {
			out.Pairs[g].NIC = ap.p.devs[d].ID
			out.Pairs[g].Level = discovery.Distance(ap.gpus[g], ap.p.devs[d].Location, ap.p.numa)
		}
	}
	return out
}
