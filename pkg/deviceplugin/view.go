package deviceplugin

import (
	"fmt"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// View is what the daemon serves at one moment, for readers outside the
// Run goroutine (the node-state publisher). It is a copy: nothing in it
// changes after View returns.
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
}

// PoolView is one served pool.
type PoolView struct {
	Name, Resource string
	Mode           config.Mode
	Binding        config.Binding
	// NoNCCL: the pool does not set NCCL's variables (config nccl: false).
	NoNCCL bool
	// Slots is a shared pool's slot count; 0 for an exclusive pool.
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
func (d *Daemon) View() (View, <-chan struct{}) {
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
func (d *Daemon) publishView(snap *nodewatch.Snapshot) {
	pools := make([]PoolView, 0, len(d.pools))
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		s, _ := p.current()
		pv := PoolView{Name: name, Resource: p.resource, Mode: p.pool.Mode, Binding: p.pool.Binding, NoNCCL: !p.pool.SetsNCCL(), ByID: make(map[string][]string, len(s.byID)),
			Memlock: p.pool.MemlockLimit()}
		if p.pool.Mode == config.Shared {
			pv.Slots = p.pool.SlotCount()
		}
		for _, m := range p.devices() {
			pv.Members = append(pv.Members, m.Name)
		}
		for _, dev := range s.devices {
			pv.Capacity++
			if dev.Health == pluginapi.Healthy {
				pv.Allocatable++
			}
			names := make([]string, 0, len(s.byID[dev.ID]))
			for _, r := range s.byID[dev.ID] {
				names = append(names, r.Name)
			}
			pv.ByID[dev.ID] = names
			if d.cdi != nil && !p.pool.GPUAligned() && p.pool.Mode == config.Exclusive {
				pv.CDIDevices = append(pv.CDIDevices, cdiName(p.resource, dev.ID))
			}
		}
		if d.cdi != nil && p.pool.Mode == config.Shared && len(pv.Members) > 0 {
			pv.CDIDevices = []string{cdiName(p.resource, cdiSharedDevice)}
		}
		pools = append(pools, pv)
	}
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	d.view = View{NodeName: d.cfg.NodeName, NUMANodes: d.numa, Snapshot: snap, Pools: pools}
	if d.viewChanged != nil {
		close(d.viewChanged)
	}
	d.viewChanged = make(chan struct{})
}

// SetNRIReport makes /state include what report returns under "nri" (the
// NRI plugin's connection). Call it before Run.
func (d *Daemon) SetNRIReport(report func() any) { d.nriReport = report }

// RegisterCollector adds a collector to the daemon's /metrics (the NRI
// plugin's series). Call it before Run.
func (d *Daemon) RegisterCollector(c prometheus.Collector) error {
	if err := d.m.reg.Register(c); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// SetNodeStateReport makes /state include what report returns under
// "nodeState" (the publisher's health). Call it before Run.
func (d *Daemon) SetNodeStateReport(report func() any) { d.nodeStateReport = report }
