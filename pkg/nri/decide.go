// Package nri is the daemon's NRI plugin (github.com/containerd/nri): at
// container creation it gives every container that got one of our RDMA
// devices an RLIMIT_MEMLOCK high enough to register memory for RDMA, and a
// container with devices of several NCCL pools the NCCL and UCX variables
// naming all of them (each pool's Allocate named its own; the kubelet kept
// one pool's).
//
// It owns the decision (Decide: which containers, which limit, which
// variables; pure, no
// I/O, no logging), the device view it decides on (Devices, built from the
// agent's View by FromView), and the plugin's connection to the runtime
// (Plugin: register, serve, reconnect with backoff, report on /state and
// /metrics), over its own encoding of the NRI messages it uses (wire.go). It never looks at a container's image or name, and it adjusts
// nothing after creation: NRI adjustments apply when the runtime creates a
// container, so a restart of the daemon or of the runtime leaves running
// containers as they are. It observes the agent (pkg/agent: its View and
// the pools config) and imports no front end (pkg/deviceplugin, pkg/dra:
// internal/importrules).
package nri

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// AnnotationKey is the pod annotation that may lower the limit of the pod's
// containers that got our devices ("8Gi", "unlimited"); a value above the
// pools' limit, or one that does not parse, is ignored.
const AnnotationKey = "memlock.kube-rdma.io/limit"

// RlimitMemlock is the rlimit type NRI and the OCI spec name.
const RlimitMemlock = "RLIMIT_MEMLOCK"

// cdiAnnotationPrefix is the prefix of the container annotations older
// runtimes read CDI device names from (the device plugin sets
// cdi.k8s.io/kube-rdma_<pool>).
const cdiAnnotationPrefix = "cdi.k8s.io/"

var (
	// ErrAboveLimit: the pod annotation asks for more than the pools allow.
	ErrAboveLimit = errors.New("above the pool's limit")
	// ErrBadAnnotation: the pod annotation does not parse.
	ErrBadAnnotation = errors.New("bad annotation")
)

// DeviceNode is one character device node of ours. Major and Minor are the
// host's numbers when known; 0/0 matches by path alone.
type DeviceNode struct {
	Path         string
	Major, Minor int64
	// Device is the RDMA device the node is of ("mlx5_0"); "" when unknown.
	Device string
}

// Pool is what the decision needs of one pool: its limit and what a
// container that got its devices carries.
type Pool struct {
	Name string
	// Limit is the pool's RLIMIT_MEMLOCK (config.MemlockUnlimited for none).
	Limit uint64
	// Nodes are the pool's uverbs, umad and issm nodes. rdma_cm is not one:
	// every RDMA container gets it, it does not name a pool, and alone it
	// cannot register memory.
	Nodes []DeviceNode
	// CDIDevices are the fully qualified CDI names Allocate hands out.
	CDIDevices []string
	// NCCL: the pool sets NCCL's and UCX's variables (its nccl, not a
	// gpuAligned pool, whose NICs the CNI plugin chooses).
	NCCL bool
}

// Devices is the daemon's device view as the decision sees it.
type Devices struct {
	Pools []Pool
	// DRAPools are the pools served through DRA, for the memlock limit
	// only: a claim's container has its devices' nodes (the claim's CDI
	// spec), and failing closed finds a claim's devices through its record
	// (claimRefusal), not through these.
	DRAPools []Pool
	// Netdev are the pools whose pods get netdevs through the CNI plugin
	// (netdevcheck.Pools), for failing closed.
	Netdev map[string]netdevcheck.Why
	// Nodes are the node's RDMA devices' uverbs, umad and issm nodes by
	// RDMA name, pools or not (a DRA claim's devices are in no Pool), and
	// Names what a claim record calls a device to its RDMA name
	// (netdevcheck.Names), for failing closed on DRA claims.
	Nodes map[string][]DeviceNode
	Names map[string]string
	// RDMA are the node's RDMA devices by name, for the NCCL and UCX
	// variables of a container with devices of several NCCL pools.
	RDMA map[string]discovery.RDMADevice
}

// Decision is what Decide chose for one container.
type Decision struct {
	// Pools are the pools whose devices the container has, sorted; none:
	// the container is left alone.
	Pools []string
	// PoolLimit is the highest limit of those pools.
	PoolLimit uint64
	// Limit is what the container gets: PoolLimit, or the pod annotation's
	// value when that is lower.
	Limit uint64
	// AnnotationIgnored says why the pod's annotation was not applied
	// (wraps ErrAboveLimit or ErrBadAnnotation); nil when it was, or when
	// there is none, or when the container has none of our devices.
	AnnotationIgnored error
	// NCCLPools are the NCCL pools whose devices the container has, and
	// Env, when they are two or more, the NCCL and UCX variables naming all
	// of those devices (containeredits.FabricEnv), sorted by name: each
	// pool's Allocate set them for its own devices, and the kubelet keeps
	// one pool's value of each.
	NCCLPools []string
	Env       []KeyValue
}

// Adjust reports whether the container gets an adjustment.
func (d Decision) Adjust() bool { return len(d.Pools) > 0 }

// Rlimits are the container's adjustment for the decision: RLIMIT_MEMLOCK
// with soft = hard = Limit, or none when the container is left alone.
func (d Decision) Rlimits() []Rlimit {
	if !d.Adjust() {
		return nil
	}
	return []Rlimit{{Type: RlimitMemlock, Hard: d.Limit, Soft: d.Limit}}
}

// Decide chooses the memlock limit of a container being created. The
// container has a pool's device (of Pools or DRAPools) when its Linux device
// list holds one of the pool's nodes (same path; same major/minor where both are known), or when
// its CDI devices or its cdi.k8s.io/ annotations name one of the pool's CDI
// devices. With devices of several pools, the highest pool limit wins. The
// pod annotation AnnotationKey may lower the limit, never raise it.
func Decide(pod Pod, ctr Container, devs Devices) Decision {
	var d Decision
	var ncclDevs []string
	for _, p := range slices.Concat(devs.Pools, devs.DRAPools) {
		matched := matchNodes(ctr, p.Nodes, false)
		held := deviceNames(matched)
		if len(matched) > 0 || hasCDI(ctr, p.CDIDevices) {
			d.Pools = append(d.Pools, p.Name)
			d.PoolLimit = max(d.PoolLimit, p.Limit)
		}
		if p.NCCL && len(held) > 0 {
			d.NCCLPools = append(d.NCCLPools, p.Name)
			ncclDevs = append(ncclDevs, held...)
		}
	}
	if len(d.Pools) == 0 {
		return Decision{}
	}
	slices.Sort(d.Pools)
	d.Pools = slices.Compact(d.Pools)
	slices.Sort(d.NCCLPools)
	if d.NCCLPools = slices.Compact(d.NCCLPools); len(d.NCCLPools) > 1 {
		d.Env = fabricEnv(ncclDevs, devs.RDMA)
	}
	d.Limit = d.PoolLimit
	v, ok := pod.Annotations[AnnotationKey]
	if !ok {
		return d
	}
	want, err := config.ParseMemlock(v)
	switch {
	case err != nil:
		d.AnnotationIgnored = fmt.Errorf("%w: %s %q: %w", ErrBadAnnotation, AnnotationKey, v, err)
	case want > d.PoolLimit:
		d.AnnotationIgnored = fmt.Errorf("%s %q is %w (%s)", AnnotationKey, v, ErrAboveLimit, config.FormatMemlock(d.PoolLimit))
	default:
		d.Limit = want
	}
	return d
}

func hasNode(ctr Container, nodes []DeviceNode) bool {
	return len(matchNodes(ctr, nodes, true)) > 0
}

// deviceNames are the RDMA devices the nodes are of (DeviceNode.Device;
// unknown ones left out), sorted, without repeats.
func deviceNames(nodes []DeviceNode) []string {
	var out []string
	for _, n := range nodes {
		if n.Device != "" {
			out = append(out, n.Device)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// matchNodes returns the nodes the container's Linux device list holds (same
// path; same major/minor where both are known); with first, only the first.
func matchNodes(ctr Container, nodes []DeviceNode, first bool) []DeviceNode {
	var out []DeviceNode
	for _, cd := range ctr.Devices {
		if cd.Type != "" && cd.Type != "c" {
			continue
		}
		p := path.Clean(cd.Path)
		for _, n := range nodes {
			if p != n.Path {
				continue
			}
			known := n.Major != 0 || n.Minor != 0
			given := cd.Major != 0 || cd.Minor != 0
			if !known || !given || (cd.Major == n.Major && cd.Minor == n.Minor) {
				out = append(out, n)
				if first {
					return out
				}
			}
		}
	}
	return out
}

// fabricEnv is containeredits.FabricEnv of the named devices (those the
// node no longer has are left out), as an adjustment sorted by key.
func fabricEnv(names []string, rdma map[string]discovery.RDMADevice) []KeyValue {
	slices.Sort(names)
	var devs []discovery.RDMADevice
	for _, n := range slices.Compact(names) {
		if d, ok := rdma[n]; ok {
			devs = append(devs, d)
		}
	}
	if len(devs) == 0 {
		return nil
	}
	e := containeredits.FabricEnv(devs)
	out := make([]KeyValue, 0, len(e))
	for k, v := range e {
		out = append(out, KeyValue{k, v})
	}
	slices.SortFunc(out, func(a, b KeyValue) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func hasCDI(ctr Container, names []string) bool {
	if len(names) == 0 {
		return false
	}
	for _, c := range ctr.CDIDevices {
		if slices.Contains(names, c) {
			return true
		}
	}
	for k, v := range ctr.Annotations {
		if !strings.HasPrefix(k, cdiAnnotationPrefix) {
			continue
		}
		for _, n := range strings.Split(v, ",") {
			if slices.Contains(names, strings.TrimSpace(n)) {
				return true
			}
		}
	}
	return false
}
