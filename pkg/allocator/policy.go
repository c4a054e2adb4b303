package allocator

import (
	"cmp"
	"slices"
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
