package nri

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// FromView builds the decision's device view from the daemon's: each pool's
// (the device plugin's and, apart, DRA's) limit, CDI names and the
// /dev/infiniband nodes of its members, with the
// host's major/minor read under devRoot (where the daemon sees the host's
// /dev) when the node is there.
func FromView(v agent.View, devRoot string) Devices {
	chars := map[string][]string{}
	out := Devices{Nodes: map[string][]DeviceNode{}, Names: netdevcheck.Names(v), RDMA: map[string]discovery.RDMADevice{}}
	if v.Snapshot != nil && v.Snapshot.Node != nil {
		for _, d := range v.Snapshot.Node.RDMADevices {
			chars[d.Name] = d.CharDevices
			out.RDMA[d.Name] = d
		}
	}
	for name, cs := range chars {
		for _, c := range cs {
			n := node(devRoot, c)
			n.Device = name
			out.Nodes[name] = append(out.Nodes[name], n)
		}
	}
	pool := func(pv agent.PoolView) Pool {
		p := Pool{Name: pv.Name, Limit: pv.Memlock, CDIDevices: pv.CDIDevices, NCCL: !pv.NoNCCL && pv.Binding != config.GPUAligned}
		for _, m := range pv.Members {
			for _, c := range chars[m] {
				n := node(devRoot, c)
				n.Device = m
				p.Nodes = append(p.Nodes, n)
			}
		}
		return p
	}
	for _, pv := range v.Pools {
		out.Pools = append(out.Pools, pool(pv))
	}
	for _, pv := range v.DRAPools {
		out.DRAPools = append(out.DRAPools, pool(pv))
	}
	return out
}

func node(devRoot, p string) DeviceNode {
	n := DeviceNode{Path: filepath.Clean(p)}
	rel, ok := strings.CutPrefix(n.Path, "/dev/")
	if !ok || devRoot == "" {
		return n
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(devRoot, rel), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR {
		n.Major, n.Minor = int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	}
	return n
}
