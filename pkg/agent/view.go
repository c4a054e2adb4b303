package agent

import (
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// View is what the agent serves at one moment, for its observers outside
// the Run goroutine (the node-state publisher, the NRI plugin). It is a
// copy: nothing in it changes after View returns.
type View struct {
	NodeName  string
	NetnsMode rdma.NetnsMode
	// NUMANodes is the node's NUMA node count (for discovery.Distance).
	NUMANodes int
	// Snapshot is the node snapshot the pools were last handed.
	Snapshot *nodewatch.Snapshot
	// ConfigErrors are the rejected reload (first) and the problems of the
	// running config.
	ConfigErrors []string
	Pools        []PoolView
	// DRAPools are the pools served through DRA (frontend dra), sorted by
	// name: Name, Mode, NoNCCL, Members and Memlock only, their devices
	// reach the kubelet as ResourceSlices. The NRI plugin sets their
	// containers' memlock limit (a claim's CDI spec gives the container the
	// members' device nodes).
	DRAPools []PoolView
}

// PoolView is one pool a front end advertises devices of (the device
// plugin's; not DRA's).
type PoolView struct {
	Name, Resource string
	Mode           config.Mode
	Binding        config.Binding
	// NoNCCL: the pool does not set NCCL's variables (config nccl: false).
	NoNCCL bool
	// Slots is a shared pool's slot count (of a dra pool: the claims each
	// member takes at once); 0 for an exclusive pool.
	Slots int
	// Members are the pool's RDMA device names.
	Members []string
	// Capacity counts the advertised kubelet devices, Allocatable the
	// healthy ones.
	Capacity, Allocatable int
	// ByID maps each advertised kubelet device ID to its RDMA device names.
	ByID map[string][]string
	// CDIDevices are the fully qualified CDI device names Allocate hands
	// out for the pool ("rdma.kube-rdma.io/hca=0000:18:00.0"); none when
	// CDI is off or for a gpuAligned pool.
	CDIDevices []string
	// Memlock is the pool's RLIMIT_MEMLOCK for the NRI plugin
	// (config.Pool.MemlockLimit).
	Memlock uint64
}

// View returns the current view and a channel closed at its next change.
func (d *Agent) View() (View, <-chan struct{}) {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	v := d.view
	v.NetnsMode = d.state.RDMANetnsMode
	v.ConfigErrors = slices.Clip(append(slices.Clip(optional(d.state.ConfigError)), d.state.Problems...))
	return v, d.viewChanged
}

func optional(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// publishView rebuilds the pools' part of the view; the caller holds no lock.
func (d *Agent) publishView(snap *nodewatch.Snapshot) {
	byName := d.assignments()
	pools := []PoolView{}
	for _, fe := range sortedKeys(d.feStatus) {
		for _, st := range d.feStatus[fe] {
			a := byName[st.Name]
			pv := PoolView{Name: st.Name, Resource: a.Resource, Mode: a.Pool.Mode, Binding: a.Pool.Binding, NoNCCL: !a.Pool.SetsNCCL(),
				ByID: make(map[string][]string, len(st.Devices)), Memlock: a.Pool.MemlockLimit(), CDIDevices: st.CDIDevices}
			if a.Pool.Mode == config.Shared {
				pv.Slots = a.Pool.SlotCount()
			}
			for _, m := range a.Members {
				pv.Members = append(pv.Members, m.Name)
			}
			for _, dev := range st.Devices {
				pv.Capacity++
				if dev.Healthy {
					pv.Allocatable++
				}
				pv.ByID[dev.ID] = append([]string{}, dev.RDMADevices...)
			}
			pools = append(pools, pv)
		}
	}
	slices.SortFunc(pools, func(a, b PoolView) int { return strings.Compare(a.Name, b.Name) })
	var draPools []PoolView
	for _, a := range d.pools[config.DRA] {
		if a.Refused != "" {
			continue
		}
		pv := PoolView{Name: a.Pool.Name, Mode: a.Pool.Mode, NoNCCL: !a.Pool.SetsNCCL(), Memlock: a.Pool.MemlockLimit()}
		if a.Pool.Mode == config.Shared {
			pv.Slots = a.Pool.SlotCount() // claims a member takes at once
		}
		for _, m := range a.Members {
			pv.Members = append(pv.Members, m.Name)
		}
		draPools = append(draPools, pv)
	}
	slices.SortFunc(draPools, func(a, b PoolView) int { return strings.Compare(a.Name, b.Name) })
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	d.view = View{NodeName: d.cfg.NodeName, NUMANodes: d.numa, Snapshot: snap, Pools: pools, DRAPools: draPools}
	if d.viewChanged != nil {
		close(d.viewChanged)
	}
	d.viewChanged = make(chan struct{})
}

// SetNRIReport makes /state include what report returns under "nri" (the
// NRI plugin's connection). Call it before Run.
func (d *Agent) SetNRIReport(report func() any) { d.nriReport = report }

// RegisterCollector adds a collector to the daemon's /metrics (the NRI
// plugin's series). Call it before Run.
func (d *Agent) RegisterCollector(c prometheus.Collector) error {
	if err := d.m.reg.Register(c); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// SetNodeStateReport makes /state include what report returns under
// "nodeState" (the publisher's health). Call it before Run.
func (d *Agent) SetNodeStateReport(report func() any) { d.nodeStateReport = report }
