package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// State is the agent's view of the node, served as JSON on /state.
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
	// HealthSince is when the daemon saw the device's health take its
	// current value.
	HealthSince *time.Time `json:"healthSince,omitempty"`
}

// DeviceState is one kubelet device.
type DeviceState struct {
	ID     string `json:"id"`
	Health string `json:"health"`
	// HealthSince is when the daemon saw the health of the device's RDMA
	// devices take its current value (the latest of them): the daemon's
	// own detection time, before the kubelet or /state is told.
	HealthSince *time.Time `json:"healthSince,omitempty"`
	RDMADevices []string   `json:"rdmaDevices"`
	NUMANodes   []int64    `json:"numaNodes,omitempty"`
}

// State returns a copy of the current state.
func (d *Agent) State() State {
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

// publishState rebuilds the pools' part of State from what the front ends
// advertise.
func (d *Agent) publishState() {
	byName := d.assignments()
	var pools []PoolState
	for _, fe := range sortedKeys(d.feStatus) {
		for _, st := range d.feStatus[fe] {
			a := byName[st.Name]
			ps := PoolState{Name: st.Name, Resource: a.Resource, Mode: a.Pool.Mode, Binding: a.Pool.Binding, Devices: []DeviceState{}}
			for _, dev := range st.Devices {
				ds := DeviceState{ID: dev.ID, Health: healthString(dev.Healthy), HealthSince: d.healthSince(dev.RDMADevices...),
					RDMADevices: append([]string{}, dev.RDMADevices...), NUMANodes: dev.NUMANodes}
				ps.Devices = append(ps.Devices, ds)
				if a.Pool.Mode == config.Shared {
					break // the slots are identical; one stands for all
				}
			}
			pools = append(pools, ps)
		}
	}
	slices.SortFunc(pools, func(a, b PoolState) int { return strings.Compare(a.Name, b.Name) })
	var draPools []DRAPoolState
	for _, a := range d.pools[config.DRA] {
		if a.Refused != "" {
			continue // no DRA front end, or refused on this node
		}
		ps := DRAPoolState{Name: a.Pool.Name, Devices: []DRADeviceState{}}
		for _, r := range a.Members {
			ps.Devices = append(ps.Devices, DRADeviceState{RDMADevice: r.Name, Healthy: d.snap != nil && d.snap.Healthy[r.Name],
				HealthSince: d.healthSince(r.Name)})
		}
		draPools = append(draPools, ps)
	}
	slices.SortFunc(draPools, func(a, b DRAPoolState) int { return strings.Compare(a.Name, b.Name) })
	d.stateMu.Lock()
	d.state.NodeName, d.state.ConfigFile, d.state.Pools = d.cfg.NodeName, d.cfg.ConfigFile, pools
	d.state.DRAPools = draPools
	d.stateMu.Unlock()
	d.publishView(d.snap)
}

// assignments are the configured pools as last handed to the front ends,
// by name.
func (d *Agent) assignments() map[string]Assignment {
	out := map[string]Assignment{}
	for _, as := range d.pools {
		for _, a := range as {
			out[a.Pool.Name] = a
		}
	}
	return out
}

// healthSince is the latest of the named RDMA devices' HealthSince in the
// current snapshot; nil when none is known.
func (d *Agent) healthSince(names ...string) *time.Time {
	if d.snap == nil {
		return nil
	}
	var out *time.Time
	for _, n := range names {
		if t, ok := d.snap.HealthSince[n]; ok && (out == nil || t.After(*out)) {
			out = &t
		}
	}
	return out
}

// healthString is a device's health as the kubelet's device plugin API
// and /state name it.
func healthString(ok bool) string {
	if ok {
		return "Healthy"
	}
	return "Unhealthy"
}
