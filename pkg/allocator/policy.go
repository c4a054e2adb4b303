package allocator

import (
	"cmp"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// closeness packs a set tightly: a candidate costs the sum of its distance
// ranks to the chosen devices, then the worst of them; a finished set costs
// the sum over all its pairs, then its worst pair, then its IDs.
type closeness struct{}

func (closeness) seeded() bool { return true }

func (closeness) key(_ *problem, c int, g *growth) [3]int { return [3]int{g.sum[c], g.worst[c], 0} }

func (closeness) better(p *problem, a, b []int) int {
	sa, ma := pairs(p, a)
	sb, mb := pairs(p, b)
	return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(ma, mb), slices.Compare(a, b))
}

func pairs(p *problem, set []int) (sum, worst int) {
	for i, a := range set {
		for _, b := range set[i+1:] {
			r := p.dist(a, b)
			sum += r
			worst = max(worst, r)
		}
	}
	return sum, worst
}

// nearest serves fixed targets (GPUs) in turn: pick k goes to the device
// closest to target k mod len(targets), then closest to all targets, then to
// the devices already picked, so two GPUs get one NIC each.
type nearest struct {
	targets []discovery.Location
	ranks   [][]int // device -> rank to each target, filled on first use
}

func (*nearest) seeded() bool { return false }

func (n *nearest) fill(p *problem) {
	if n.ranks != nil {
		return
	}
	n.ranks = make([][]int, len(p.devs))
	for i, d := range p.devs {
		n.ranks[i] = make([]int, len(n.targets))
		for j, t := range n.targets {
			n.ranks[i][j] = discovery.Distance(d.Location, t, p.numa).Rank()
		}
	}
}

func (n *nearest) key(p *problem, c int, g *growth) [3]int {
	n.fill(p)
	total := 0
	for _, r := range n.ranks[c] {
		total += r
	}
	return [3]int{n.ranks[c][len(g.chosen)%len(n.targets)], total, g.sum[c]}
}

// better compares sets built for different link layers: the set whose
// devices are nearer their closest target wins, then nearer all targets,
// then the one with the smaller IDs.
func (n *nearest) better(p *problem, a, b []int) int {
	n.fill(p)
	cost := func(set []int) (closest, total int) {
		for _, d := range set {
			closest += slices.Min(n.ranks[d])
			for _, r := range n.ranks[d] {
				total += r
			}
		}
		return closest, total
	}
	ca, ta := cost(a)
	cb, tb := cost(b)
	return cmp.Or(cmp.Compare(ca, cb), cmp.Compare(ta, tb), slices.Compare(a, b))
}
