// Package allocator chooses devices. It is pure and deterministic: a
// topology and a request go in, a choice comes out; it does no I/O, reads no
// clock and logs nothing, so every policy is tested on golden topologies.
//
// Closest, the device plugin's GetPreferredAllocation, packs devices close
// to each other: one comparator over candidate picks plus one over finished
// sets (see policy) feeding one greedy loop. AlignToGPUs, for binding NICs
// to the GPUs of a pod, pairs free NICs with the pod's GPUs by an exact
// minimum-cost assignment (see align.go and assign.go).
//
// Both first narrow the candidates (see candidates):
//
//   - An unhealthy device is never picked unless it is in MustInclude (the
//     kubelet may force it). If fewer than Size healthy devices (plus the
//     forced ones) are available, the request fails with ErrBadRequest: a
//     preference that names a device known to be broken would be a wrong
//     answer, and the kubelet then falls back to its own choice.
//   - An InfiniBand port and an Ethernet port cannot talk RDMA to each
//     other, so a set keeps to one link layer. An unknown link layer ("")
//     goes with any. If MustInclude fixes a link layer, only that layer is
//     considered; if it holds two, the kubelet forced a mix and every layer
//     is. Otherwise each layer that can fill Size on its own is tried and the
//     best set wins (as the policy compares finished sets: for Closest the
//     closest), ties going to the set with the smaller IDs as everywhere
//     else.
//   - Only when no single layer can fill Size is a mixed set returned: the
//     kubelet asks for a preference, and a mixed set it may still use is
//     better than none.
package allocator

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

var (
	// ErrUnknownDevice: a request names a device the topology does not have.
	ErrUnknownDevice = errors.New("unknown device")
	// ErrBadRequest: the request cannot be satisfied as asked.
	ErrBadRequest = errors.New("bad allocation request")
)

// Device is one allocatable device and where it sits.
type Device struct {
	ID       string
	Location discovery.Location
	// Unhealthy devices are picked only when MustInclude names them. The
	// zero value is healthy.
	Unhealthy bool
	// LinkLayer is the port's link layer, "InfiniBand" or "Ethernet"; ""
	// (unknown) is compatible with any.
	LinkLayer string
}

// Topology is every device the caller knows, and the NUMA node count that
// discovery.Distance needs.
type Topology struct {
	Devices   []Device
	NUMANodes int
}

// Request asks for Size devices out of Available, keeping every MustInclude.
type Request struct {
	Available   []string
	MustInclude []string
	Size        int
}

// Closest picks Size devices from Available that are closest to each other:
// first the fewest, shortest PCIe hops (same switch, then same root complex,
// then same NUMA node, then anything), with MustInclude always in. Ties go
// to the lexically smallest IDs. Unhealthy devices and other link layers are
// left out as the package doc says. The result is sorted.
func Closest(t Topology, r Request) ([]string, error) {
	return choose(t, r, closeness{})
}

// NearestTo is AlignToGPUs's NIC list, for callers that need no pairing;
// targets are the GPUs' locations and must not be empty.
func NearestTo(t Topology, r Request, targets []discovery.Location) ([]string, error) {
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: no targets", ErrBadRequest)
	}
	a, err := AlignToGPUs(t, r, targets)
	if err != nil {
		return nil, err
	}
	return a.NICs, nil
}

// problem is a request resolved to indexes into a sorted device list, with
// the pairwise PCIe distance ranks once fillRanks has run.
type problem struct {
	devs  []Device
	numa  int
	avail []int // the candidates of the pick under way, a subset of devs
	must  []int
	size  int
	rank  []int8 // rank[i*len(devs)+j]
}

func (p *problem) dist(i, j int) int { return int(p.rank[i*len(p.devs)+j]) }

func resolve(t Topology, r Request) (*problem, error) {
	byID := map[string]Device{}
	for _, d := range t.Devices {
		byID[d.ID] = d
	}
	ids := slices.Clone(r.Available)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	p := &problem{numa: t.NUMANodes, size: r.Size}
	index := map[string]int{}
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("available device %q: %w", id, ErrUnknownDevice)
		}
		index[id] = len(p.devs)
		p.devs = append(p.devs, d)
	}
	for _, id := range r.MustInclude {
		i, ok := index[id]
		if !ok {
			if _, known := byID[id]; !known {
				return nil, fmt.Errorf("must-include device %q: %w", id, ErrUnknownDevice)
			}
			return nil, fmt.Errorf("%w: must-include device %q is not available", ErrBadRequest, id)
		}
		if !slices.Contains(p.must, i) {
			p.must = append(p.must, i)
		}
	}
	switch {
	case r.Size <= 0:
		return nil, fmt.Errorf("%w: size %d", ErrBadRequest, r.Size)
	case r.Size > len(p.devs):
		return nil, fmt.Errorf("%w: size %d, only %d available", ErrBadRequest, r.Size, len(p.devs))
	case len(p.must) > r.Size:
		return nil, fmt.Errorf("%w: %d must-include devices for size %d", ErrBadRequest, len(p.must), r.Size)
	}
	return p, nil
}

// fillRanks computes the pairwise distance ranks (Closest needs them,
// AlignToGPUs does not).
func (p *problem) fillRanks() {
	n := len(p.devs)
	p.rank = make([]int8, n*n)
	for i := range n {
		for j := i + 1; j < n; j++ {
			r := int8(discovery.Distance(p.devs[i].Location, p.devs[j].Location, p.numa).Rank())
			p.rank[i*n+j], p.rank[j*n+i] = r, r
		}
	}
}

// policy is what a selection strategy decides.
type policy interface {
	// key ranks candidate c for the next slot; keys compare
	// lexicographically, lower is better, and ties go to the lower index
	// (the smaller ID).
	key(p *problem, c int, g *growth) [3]int
	// seeded says whether, with nothing chosen yet, every device should be
	// tried as the first pick (and the finished sets compared with better;
	// better also compares the best sets of different link layers).
	seeded() bool
	// better compares two finished sets; negative means a is better.
	better(p *problem, a, b []int) int
}

// growth is a set being built, with each device's sum and worst distance
// rank to the members, kept up to date as members are added.
type growth struct {
	chosen []int
	in     []bool
	sum    []int
	worst  []int
}

func (g *growth) add(p *problem, c int) {
	g.chosen = append(g.chosen, c)
	g.in[c] = true
	for _, x := range p.avail {
		r := p.dist(x, c)
		g.sum[x] += r
		g.worst[x] = max(g.worst[x], r)
	}
}

func choose(t Topology, r Request, pol policy) ([]string, error) {
	return chooseSeeds(t, r, pol, true)
}

// chooseSeeds is choose; prune=false tries every device as a seed (tests
// compare both).
func chooseSeeds(t Topology, r Request, pol policy, prune bool) ([]string, error) {
	p, err := resolve(t, r)
	if err != nil {
		return nil, err
	}
	p.fillRanks()
	groups, err := candidates(p)
	if err != nil {
		return nil, err
	}
	var best []int
	for _, g := range groups {
		if len(g) < p.size {
			continue
		}
		p.avail = g
		if set := pick(p, pol, prune); best == nil || pol.better(p, set, best) < 0 {
			best = set
		}
	}
	if best == nil {
		// No single link layer can fill the request: mix them.
		p.avail = healthy(p)
		best = pick(p, pol, prune)
	}
	out := make([]string, len(best))
	for i, d := range best {
		out[i] = p.devs[d].ID
	}
	slices.Sort(out)
	return out, nil
}

// pick chooses p.size devices out of p.avail with pol.
func pick(p *problem, pol policy, prune bool) []int {
	var best []int
	if len(p.must) == 0 && pol.seeded() {
		// Devices under the same bridge with the same NUMA node are at the
		// same distance from everything else, so only the first (smallest
		// ID) of each such class needs to be tried as a seed.
		seen := map[string]bool{}
		for _, s := range p.avail {
			l := p.devs[s].Location
			class := fmt.Sprintf("%s|%s|%d", l.PCIeRoot, strings.Join(l.Bridges(), "/"), l.NUMANode)
			if prune && seen[class] {
				continue
			}
			seen[class] = true
			set := grow(p, pol, []int{s})
			if best == nil || pol.better(p, set, best) < 0 {
				best = set
			}
		}
	} else {
		best = grow(p, pol, p.must)
	}
	return best
}

// grow adds the best candidate until the set has size devices. Candidates
// are scanned in ID order and a later one wins only when strictly better.
func grow(p *problem, pol policy, start []int) []int {
	n := len(p.devs)
	g := &growth{in: make([]bool, n), sum: make([]int, n), worst: make([]int, n)}
	for _, c := range start {
		g.add(p, c)
	}
	for len(g.chosen) < p.size {
		pick := -1
		var best [3]int
		for _, c := range p.avail {
			if g.in[c] {
				continue
			}
			if k := pol.key(p, c, g); pick < 0 || slices.Compare(k[:], best[:]) < 0 {
				pick, best = c, k
			}
		}
		g.add(p, pick)
	}
	slices.Sort(g.chosen)
	return g.chosen
}
