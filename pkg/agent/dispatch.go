package agent

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// applyConfig switches to a new config: every front end gets its pools
// with their members at once. A front end keeps a pool whose definition and
// resource name are unchanged running, and replaces a changed one.
func (d *Agent) applyConfig(c config.Config, snap *nodewatch.Snapshot) {
	d.conf = c
	d.devGen = 0 // membership may have changed: hand every pool its devices
	d.push(snap)
}

// push hands a snapshot to every front end, with the devices lent to pods
// added (lentKeeper). Pool membership is recomputed only when devices
// changed, not on every health change.
func (d *Agent) push(raw *nodewatch.Snapshot) {
	snap, kept := d.lent.apply(raw, time.Now())
	members := raw.DevicesGen != d.devGen || kept
	if members {
		assigned := d.assign(snap)
		d.pools = map[config.Frontend][]Assignment{}
		for _, p := range d.conf.Pools {
			fe := frontendOf(p)
			a := Assignment{Pool: p, Resource: d.conf.ResourceName(p), Refused: d.refusal(p)}
			if a.Refused == "" {
				a.Members = append([]discovery.RDMADevice{}, assigned[p.Name]...)
			}
			d.pools[fe] = append(d.pools[fe], a)
		}
	}
	d.poolsFile.update(d.cfg.PoolsFile, members, d.cfg.Uninstalling, d.log, d.conf, d.pools)
	if d.poolsFile.withdrawn {
		d.lent.withdraw()
	}
	d.feStatus = map[config.Frontend][]PoolStatus{}
	for _, name := range sortedKeys(d.cfg.FrontEnds) {
		// Every snapshot: a health change is a device list or taint change.
		u := Update{Pools: d.pools[name], MembersChanged: members, Healthy: snap.Healthy}
		if snap.Node != nil {
			u.GPUs = snap.Node.GPUs
		}
		if err := d.cfg.FrontEnds[name].Update(u); err != nil {
			d.log.Warn("update front end", "frontend", name, "err", err)
		}
		d.feStatus[name] = d.cfg.FrontEnds[name].Status()
	}
	d.devGen = raw.DevicesGen
	d.snap, d.raw = snap, raw
	d.setDeviceGauges()
	d.publishState()
}

// setDeviceGauges sets the device gauges of every pool a front end
// advertises devices of, and drops those of pools no longer advertised.
func (d *Agent) setDeviceGauges() {
	seen := map[string]bool{}
	for _, name := range sortedKeys(d.feStatus) {
		for _, ps := range d.feStatus[name] {
			healthy, unhealthy := 0, 0
			for _, dev := range ps.Devices {
				if dev.Healthy {
					healthy++
				} else {
					unhealthy++
				}
			}
			d.m.setDevices(ps.Name, healthy, unhealthy)
			seen[ps.Name] = true
		}
	}
	for _, name := range sortedKeys(d.gauged) {
		if !seen[name] {
			d.m.forgetPool(name)
		}
	}
	d.gauged = seen
}

// assign maps devices to pools and records configuration problems.
func (d *Agent) assign(snap *nodewatch.Snapshot) map[string][]discovery.RDMADevice {
	var problems []string
	assigned, err := d.conf.Assign(snap.Node.RDMADevices)
	if err != nil {
		problems = append(problems, splitErrors(err)...)
	}
	if d.stateNetns() == rdma.NetnsExclusive {
		for _, p := range d.conf.Pools {
			if p.Mode == config.Shared {
				problems = append(problems, fmt.Sprintf("pool %q is shared but the RDMA subsystem is in exclusive netns mode: "+
					"a device can be in one network namespace only, so pods cannot share it", p.Name))
			}
		}
	}
	for _, p := range d.conf.Pools {
		if msg := d.refusal(p); msg != "" {
			problems = append(problems, msg)
		}
	}
	problems = append(problems, d.conf.NCCLConflicts(func(p config.Pool) bool {
		return len(assigned[p.Name]) > 0 && d.refusal(p) == ""
	})...)
	for _, pr := range problems {
		d.log.Warn("config problem", "problem", pr)
	}
	d.m.problems.Set(float64(len(problems)))
	d.stateMu.Lock()
	d.state.Problems = problems
	d.stateMu.Unlock()
	return assigned
}

// refusal says why a pool is not served on this node, "" when it is. A
// pool is refused when the agent has not its front end, or its front end
// refuses it (PoolRefuser). Otherwise only
// gpuAligned pools are refused: every container gets the device nodes of
// every NIC of the pool, and only the exclusive netns mode makes an RDMA
// device unusable outside the network namespace it is in.
func (d *Agent) refusal(p config.Pool) string {
	if fe := frontendOf(p); d.cfg.FrontEnds[fe] == nil {
		if fe == config.DRA {
			return fmt.Sprintf("pool %q has frontend dra but the daemon runs without the DRA front end; the pool is not served: "+
				"start it with --dra, or give the pool frontend devicePlugin", p.Name)
		}
		return fmt.Sprintf("pool %q has frontend %s but the daemon runs without that front end; the pool is not served", p.Name, fe)
	}
	if r, ok := d.cfg.FrontEnds[frontendOf(p)].(PoolRefuser); ok {
		if msg := r.Refusal(p); msg != "" {
			return msg
		}
	}
	if !p.GPUAligned() {
		return ""
	}
	if mode := d.stateNetns(); mode != rdma.NetnsExclusive {
		return fmt.Sprintf("pool %q has binding gpuAligned but the RDMA subsystem's netns mode is %s, not exclusive; the pool is not served: "+
			"its containers get the device nodes of every NIC of the pool, and only in exclusive mode is an RDMA device usable solely "+
			"from the network namespace it is in. Fix: rdma system set netns exclusive (before any RDMA device is in use), "+
			"or the ib_core module parameter netns_mode=0 at boot", p.Name, mode)
	}
	if d.cfg.AllocDir == "" {
		return fmt.Sprintf("pool %q has binding gpuAligned but --alloc-dir is empty; the pool is not served: "+
			"its containers need an allocation directory (set --alloc-dir, or in the chart give a pool binding gpuAligned in its values)", p.Name)
	}
	return ""
}

func splitErrors(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// reload re-reads the config file; a bad file keeps the running config.
func (d *Agent) reload() {
	c, data, err := config.Load(d.cfg.ConfigFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return // mid-update (ConfigMap symlink swap); the create event follows
	case data != nil && slices.Equal(data, d.confData):
		return // unchanged, or the same bad file already reported
	case data != nil:
		d.confData = data
	}
	if err != nil {
		d.m.reload(false)
		d.log.Error("config reload rejected; the last good config keeps running", "file", d.cfg.ConfigFile, "err", err)
		d.stateMu.Lock()
		d.state.ConfigError = err.Error()
		d.stateMu.Unlock()
		d.publishState()
		return
	}
	d.m.reload(true)
	d.stateMu.Lock()
	d.state.ConfigError = ""
	d.stateMu.Unlock()
	d.log.Info("config reloaded", "file", d.cfg.ConfigFile, "pools", len(c.Pools))
	snap, _ := d.node.Latest()
	d.applyConfig(c, snap)
}

// watchConfig reports changes of the config file, or of the ..data link a
// mounted ConfigMap swaps; with no file it reports nothing.
func watchConfig(path string) (<-chan struct{}, func(), error) {
	out := make(chan struct{}, 1)
	if path == "" {
		return out, func() {}, nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, nil, fmt.Errorf("watch config dir: %w", err)
	}
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, nil, fmt.Errorf("watch config dir: %w", err)
	}
	go func() {
		for ev := range w.Events {
			if base := filepath.Base(ev.Name); base == filepath.Base(path) || base == "..data" {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	go func() {
		for range w.Errors {
		}
	}()
	return out, func() { _ = w.Close() }, nil
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
