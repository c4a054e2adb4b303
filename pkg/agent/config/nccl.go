package config

import "fmt"

// ncclConflicts refuses two NCCL pools (Pool.SetsNCCL). A pod may ask for
// any pools together, a container has one value per variable, and nothing
// that sets them sees every pool of a container in every mode:
//
//   - Two device plugin pools: each pool's Allocate sees only its own
//     devices, and the kubelet keeps one value per key of the responses (the
//     first it merges, in no fixed order). NCCL_IB_HCA would name one pool's
//     NICs, and a RoCE pool's NCCL_IB_GID_INDEX could meet an InfiniBand
//     HCA.
//   - A device plugin pool and a dra pool, or two dra pools: the kubelet's
//     environment and each claim's CDI environment meet in the runtime,
//     which keeps one value. (One claim is prepared as a whole: its NCCL
//     variables name every NCCL NIC of the claim, pkg/dra.)
//
// The NRI plugin sees a container's whole device list, but it is optional
// and off by default; the CNI plugin sees the pod's attachments but cannot
// set a container's environment. So the one place that knows all of a
// container's NCCL devices is the one NCCL pool's own allocation.
func (c Config) ncclConflicts() []error {
	var errs []error
	first := -1
	for i, p := range c.Pools {
		if !p.SetsNCCL() {
			continue
		}
		if first < 0 {
			first = i
			continue
		}
		a, b := p, c.Pools[first]
		var why string
		switch {
		case !a.DRA() && !b.DRA():
			why = "a pod that asks for both gets the NCCL_IB_HCA of one of them (each pool's Allocate names its own devices and the kubelet keeps one value per variable), so NCCL uses only that pool's NICs"
		default:
			why = "a pod with devices of both gets two NCCL_IB_HCA values (the kubelet's environment and a claim's CDI environment, or two claims') and the runtime keeps one, so NCCL uses only one pool's NICs"
		}
		errs = append(errs, &FieldError{
			Field: fmt.Sprintf("pools[%d].nccl", i),
			Msg: fmt.Sprintf("pools %q and %q (pools[%d]) both set NCCL's variables (nccl is true unless set to false): %s; "+
				"set nccl: false on the pool that is not NCCL's fabric (a storage or front-end network), or select both pools' NICs in one pool",
				a.Name, b.Name, first, why),
		})
	}
	return errs
}
