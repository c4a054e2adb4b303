// Package natsort orders names the way people read them: "mlx5_2" before
// "mlx5_10". It is the one home of that comparison (device names in
// discovery, interface order in the CNI); it does no I/O.
package natsort

import (
	"slices"
	"strings"
)

// Compare returns <0, 0 or >0 as a sorts before, with or after b. Runs of
// decimal digits compare by value (of any length: leading zeros are ignored
// and a longer run is larger), everything else byte by byte.
func Compare(a, b string) int {
	for a != "" && b != "" {
		ad, bd := digits(a), digits(b)
		if ad > 0 && bd > 0 {
			x, y := strings.TrimLeft(a[:ad], "0"), strings.TrimLeft(b[:bd], "0")
			if len(x) != len(y) {
				return compareInt(len(x), len(y))
			}
			if c := strings.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[ad:], b[bd:]
			continue
		}
		if a[0] != b[0] {
			return compareInt(int(a[0]), int(b[0]))
		}
		a, b = a[1:], b[1:]
	}
	return compareInt(len(a), len(b))
}

// Sort sorts names in natural order.
func Sort(names []string) { slices.SortFunc(names, Compare) }

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
