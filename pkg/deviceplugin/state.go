package deviceplugin

import (
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// State is the daemon's view of the node, served as JSON on /state.
type State struct {
	NodeName      string         `json:"nodeName"`
	RDMANetnsMode rdma.NetnsMode `json:"rdmaNetnsMode"`
	ConfigFile    string         `json:"configFile,omitempty"`
	ConfigError   string         `json:"configError,omitempty"`
	Problems      []string       `json:"problems,omitempty"`
	Pools         []PoolState    `json:"pools"`
	// DRAPools are the pools handed to the DRA front end (docs/dra.md).
	DRAPools []DRAPoolState `json:"draPools,omitempty"`
	// NodeState is the RDMANodeState publisher's report; absent when the
	// daemon does not publish.
	NodeState any `json:"nodeState,omitempty"`
	// NRI is the NRI plugin's report (pkg/nri): whether it runs and is
	// connected to the runtime, and why not.
	NRI any `json:"nri,omitempty"`
}

// PoolState is one pool's advertised devices.
type PoolState struct {
	Name     string         `json:"name"`
	Resource string         `json:"resource"`
	Mode     config.Mode    `json:"mode"`
	Binding  config.Binding `json:"binding,omitempty"`
	Devices  []DeviceState  `json:"devices"`
}

// DRAPoolState is one pool served by the DRA front end: its RDMA devices
// and their health (an unhealthy one is published with a taint).
type DRAPoolState struct {
	Name    string           `json:"name"`
	Devices []DRADeviceState `json:"devices"`
}

// DRADeviceState is one RDMA device of a dra pool.
type DRADeviceState struct {
	RDMADevice string `json:"rdmaDevice"`
	Healthy    bool   `json:"healthy"`
}

// DeviceState is one kubelet device.
type DeviceState struct {
	ID          string   `json:"id"`
	Health      string   `json:"health"`
	RDMADevices []string `json:"rdmaDevices"`
	NUMANodes   []int64  `json:"numaNodes,omitempty"`
}

// State returns a copy of the current state.
func (d *Daemon) State() State {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	s := d.state
	s.Pools = append([]PoolState(nil), s.Pools...)
	s.DRAPools = append([]DRAPoolState(nil), s.DRAPools...)
	if d.nodeStateReport != nil {
		s.NodeState = d.nodeStateReport()
	}
	if d.nriReport != nil {
		s.NRI = d.nriReport()
	}
	return s
}

// publishState rebuilds the pools' part of State from what they advertise.
func (d *Daemon) publishState() {
	var pools []PoolState
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		snap, _ := p.current()
		ps := PoolState{Name: name, Resource: p.resource, Mode: p.pool.Mode, Binding: p.pool.Binding, Devices: []DeviceState{}}
		for _, dev := range snap.devices {
			ds := DeviceState{ID: dev.ID, Health: dev.Health, RDMADevices: []string{}}
			for _, r := range snap.byID[dev.ID] {
				ds.RDMADevices = append(ds.RDMADevices, r.Name)
			}
			for _, n := range dev.GetTopology().GetNodes() {
				ds.NUMANodes = append(ds.NUMANodes, n.ID)
			}
			ps.Devices = append(ps.Devices, ds)
			if p.pool.Mode == config.Shared {
				break // the slots are identical; one stands for all
			}
		}
		pools = append(pools, ps)
	}
	var draPools []DRAPoolState
	for _, name := range sortedKeys(d.draPools) {
		ps := DRAPoolState{Name: name, Devices: []DRADeviceState{}}
		for _, r := range d.draPools[name] {
			ps.Devices = append(ps.Devices, DRADeviceState{RDMADevice: r.Name, Healthy: d.snap != nil && d.snap.Healthy[r.Name]})
		}
		draPools = append(draPools, ps)
	}
	d.stateMu.Lock()
	d.state.NodeName, d.state.ConfigFile, d.state.Pools = d.cfg.NodeName, d.cfg.ConfigFile, pools
	d.state.DRAPools = draPools
	d.stateMu.Unlock()
	d.publishView(d.snap)
}
