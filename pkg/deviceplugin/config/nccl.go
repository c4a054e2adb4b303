package config

import (
	"fmt"
	"slices"
	"strings"
)

// ncclConflicts refuses two NCCL pools (Pool.SetsNCCL) whose devices one
// container could get together with different NCCL values. A container has
// one value per variable, and nothing that sets them sees every pool:
//
//   - Two device plugin pools: each pool's Allocate sees only its own
//     devices, and the kubelet keeps one value per key of the responses (the
//     first it merges, in no fixed order). NCCL_IB_HCA would name one pool's
//     NICs, so two such pools are refused whatever their link layers.
//   - A device plugin pool and a dra pool: the kubelet's NCCL_IB_HCA and the
//     claim's CDI environment meet in the runtime, which keeps one.
//   - Two dra pools: the driver prepares a claim as a whole and names every
//     NCCL NIC of the claim once (pkg/dra), so they may both be NCCL pools,
//     unless their selectors say they are on different link layers: one
//     NCCL_IB_GID_INDEX cannot serve an InfiniBand HCA and a RoCE NIC.
//
// A pool whose link layer the selectors leave open is checked on the node:
// the environment of a set of devices carries NCCL_IB_GID_INDEX only when
// every port is RoCE and all agree on the index (containeredits.NCCLEnv).
func (c Config) ncclConflicts() []error {
	var errs []error
	for i := range c.Pools {
		for j := 0; j < i; j++ {
			a, b := c.Pools[i], c.Pools[j]
			if !a.SetsNCCL() || !b.SetsNCCL() {
				continue
			}
			var why string
			switch {
			case !a.DRA() && !b.DRA():
				why = "a pod that asks for both gets the NCCL_IB_HCA of one of them (each pool's Allocate names its own devices and the kubelet keeps one value per variable), so NCCL uses only that pool's NICs"
			case a.DRA() != b.DRA():
				why = "a pod with a claim of the dra pool and the other pool's resource gets two NCCL_IB_HCA values (the kubelet's and the claim's CDI environment) and keeps one, so NCCL uses only one pool's NICs"
			default:
				la, lb := declaredLinkLayers(a), declaredLinkLayers(b)
				if la == nil || lb == nil || slices.Equal(la, lb) {
					continue
				}
				why = fmt.Sprintf("a claim with devices of both would give NCCL one NCCL_IB_HCA over link layers %s and %s, and no NCCL_IB_GID_INDEX serves both",
					strings.Join(la, ","), strings.Join(lb, ","))
			}
			errs = append(errs, &FieldError{
				Field: fmt.Sprintf("pools[%d].nccl", i),
				Msg: fmt.Sprintf("pools %q and %q (pools[%d]) both set NCCL's variables (nccl is true unless set to false): %s; "+
					"set nccl: false on the pool that is not NCCL's fabric (a storage or front-end network), or select both pools' NICs in one pool",
					a.Name, b.Name, j, why),
			})
		}
	}
	return errs
}

// declaredLinkLayers is the sorted linkLayers selector of a pool; nil when
// the selectors leave the link layer open.
func declaredLinkLayers(p Pool) []string {
	if len(p.Selectors.LinkLayers) == 0 {
		return nil
	}
	l := slices.Clone(p.Selectors.LinkLayers)
	slices.Sort(l)
	return slices.Compact(l)
}
