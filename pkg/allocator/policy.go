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

func (closeness) pick(p *problem, chosen []int, a, b int) int {
	sa, ma := toSet(p, a, chosen)
	sb, mb := toSet(p, b, chosen)
	return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(ma, mb), cmp.Compare(a, b))
}

func (closeness) better(p *problem, a, b []int) int {
	sa, ma := pairs(p, a)
	sb, mb := pairs(p, b)
	return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(ma, mb), slices.Compare(a, b))
}

// toSet returns the sum and the maximum of c's ranks to each member of set.
func toSet(p *problem, c int, set []int) (sum, worst int) {
	for _, s := range set {
		r := p.dist(c, s)
		sum += r
		worst = max(worst, r)
	}
	return sum, worst
}

func pairs(p *problem, set []int) (sum, worst int) {
	for i, a := range set {
		s, w := toSet(p, a, set[i+1:])
		sum += s
		worst = max(worst, w)
	}
	return sum, worst
}

// nearest serves fixed targets (GPUs) in turn: pick k goes to the device
// closest to target k mod len(targets), then closest to all targets, then to
// the devices already picked, so two GPUs get one NIC each.
type nearest struct {
	targets []discovery.Location
}

func (nearest) seeded() bool { return false }

func (n nearest) pick(p *problem, chosen []int, a, b int) int {
	ba, ta := n.toTargets(p, a, len(chosen))
	bb, tb := n.toTargets(p, b, len(chosen))
	sa, _ := toSet(p, a, chosen)
	sb, _ := toSet(p, b, chosen)
	return cmp.Or(cmp.Compare(ba, bb), cmp.Compare(ta, tb), cmp.Compare(sa, sb), cmp.Compare(a, b))
}

func (nearest) better(p *problem, a, b []int) int { return slices.Compare(a, b) }

// toTargets returns the rank from device c to the target whose turn it is,
// and the sum of its ranks to all targets.
func (n nearest) toTargets(p *problem, c, turn int) (own, total int) {
	for i, t := range n.targets {
		r := discovery.Distance(p.devs[c].Location, t, p.numa).Rank()
		if i == turn%len(n.targets) {
			own = r
		}
		total += r
	}
	return own, total
}
