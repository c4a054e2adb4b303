package allocator

import (
	"fmt"
	"slices"
)

// candidates narrows the request to the device sets a pick may draw from,
// each of a single link layer (devices of unknown layer belong to every
// set), in layer name order. Unhealthy devices are
// in none unless they must be included. It fails when not enough healthy
// devices are available. A set smaller than the request is returned too;
// the caller skips it.
func candidates(p *problem) ([][]int, error) {
	ok := healthy(p)
	if len(ok) < p.size {
		return nil, fmt.Errorf("%w: size %d, only %d healthy devices available", ErrBadRequest, p.size, len(ok))
	}
	var forced []string
	for _, i := range p.must {
		if l := p.devs[i].LinkLayer; l != "" && !slices.Contains(forced, l) {
			forced = append(forced, l)
		}
	}
	var layers []string
	switch len(forced) {
	case 0:
		for _, i := range ok {
			if l := p.devs[i].LinkLayer; l != "" && !slices.Contains(layers, l) {
				layers = append(layers, l)
			}
		}
		slices.Sort(layers)
	case 1:
		layers = forced
	default:
		// The kubelet forced devices of different layers: nothing to keep.
		return [][]int{ok}, nil
	}
	if len(layers) == 0 {
		return [][]int{ok}, nil
	}
	groups := make([][]int, 0, len(layers))
	for _, l := range layers {
		var g []int
		for _, i := range ok {
			if ll := p.devs[i].LinkLayer; ll == "" || ll == l {
				g = append(g, i)
			}
		}
		groups = append(groups, g)
	}
	return groups, nil
}

// healthy returns the indexes of the healthy devices and of the ones that
// must be included, in index order.
func healthy(p *problem) []int {
	var out []int
	for i, d := range p.devs {
		if !d.Unhealthy || slices.Contains(p.must, i) {
			out = append(out, i)
		}
	}
	return out
}
