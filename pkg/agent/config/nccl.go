package config

import (
	"fmt"
	"strings"
)

// NCCLConflicts reports pools that set NCCL's variables (Pool.SetsNCCL)
// and have devices on a node (served) when there are two or more of them:
// one message naming them all, or none. Such a configuration loads (an
// earlier release accepted it, and a daemon that refused it would exit at
// start); the agent reports the message on the nodes where it matters. A
// pod may ask for any pools together, a container has one value per
// variable, and nothing that sets them sees every pool of a container in
// every mode:
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
// A node where only one of them has devices (InfiniBand nodes and RoCE
// nodes in one cluster, each with its own NCCL pool) has nothing to report.
func (c Config) NCCLConflicts(served func(Pool) bool) []string {
	var names []string
	for _, p := range c.Pools {
		if p.SetsNCCL() && served(p) {
			names = append(names, fmt.Sprintf("%q", p.Name))
		}
	}
	if len(names) < 2 {
		return nil
	}
	return []string{fmt.Sprintf("pools %s all set NCCL's variables (nccl is true unless set to false) and have devices on this node: "+
		"a container with devices of two of them gets one pool's NCCL_IB_HCA (each pool names its own devices and the kubelet or the runtime "+
		"keeps one value per variable; only the NRI plugin, when on and connected as the container is created, sets values naming all of them), so NCCL uses only that pool's NICs. Fix: select the NICs NCCL uses (every rail) in one pool, "+
		"and set nccl: false on pools that are not NCCL's fabric (a storage or front-end network)", strings.Join(names, ", "))}
}
