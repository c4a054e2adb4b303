package discovery

// Level is the PCIe distance between two devices, named as `nvidia-smi topo -m`
// names it. Levels compare by Rank: a lower rank is closer.
type Level string

const (
	// PIX: both under one PCIe switch.
	PIX Level = "PIX"
	// PXB: through several bridges or switches, without the host bridge.
	PXB Level = "PXB"
	// PHB: through a host bridge (same root complex, different root ports).
	PHB Level = "PHB"
	// NODE: between host bridges of one NUMA node.
	NODE Level = "NODE"
	// SYS: across NUMA nodes (or NUMA placement unknown on a multi-node host).
	SYS Level = "SYS"
)

// Levels lists the levels closest first.
var Levels = []Level{PIX, PXB, PHB, NODE, SYS}

// Rank orders levels: 0 for PIX up to 4 for SYS, 5 for an unknown level.
func (l Level) Rank() int {
	for i, x := range Levels {
		if x == l {
			return i
		}
	}
	return len(Levels)
}

// Distance returns the level of the path between two PCI functions.
//
// Within one host bridge (same PCIeRoot) it looks at the bridges above each
// function (its PCIPath without the function itself): with no common bridge
// the path goes through the host bridge (PHB); otherwise, if at most one
// bridge lies below the deepest common one on each side, both hang off one
// switch (PIX), else several switches (PXB). Functions of one device, and a
// VF with its PF, are PIX.
//
// Across host bridges it is NODE when both NUMA nodes are equal and SYS when
// they differ. An unknown NUMA node (-1) counts as the same node when the
// host has at most one NUMA node (numaNodes <= 1), and as SYS otherwise: we
// do not claim locality we cannot see. A device off PCI (soft-RoCE) has no
// host bridge and follows the same NUMA rule.
func Distance(a, b Location, numaNodes int) Level {
	if a.PCIeRoot != "" && a.PCIeRoot == b.PCIeRoot {
		ab, bb := a.Bridges(), b.Bridges()
		common := 0
		for common < len(ab) && common < len(bb) && ab[common] == bb[common] {
			common++
		}
		if common == 0 {
			return PHB
		}
		if len(ab)-common <= 1 && len(bb)-common <= 1 {
			return PIX
		}
		return PXB
	}
	if sameNUMA(a.NUMANode, b.NUMANode, numaNodes) {
		return NODE
	}
	return SYS
}

// Bridges is the PCI path above the function itself: the bridges that decide
// its distance to every other function.
func (l Location) Bridges() []string {
	if len(l.PCIPath) == 0 {
		return nil
	}
	return l.PCIPath[:len(l.PCIPath)-1]
}

func sameNUMA(a, b, numaNodes int) bool {
	if a >= 0 && b >= 0 {
		return a == b
	}
	return numaNodes <= 1
}
