package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"

	"github.com/fsnotify/fsnotify"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// applyConfig starts, keeps or replaces pool servers for a new config. A
// pool whose definition and resource name are unchanged keeps running; a
// changed one is closed (its streams end, its socket goes) and a new server
// serves and registers it.
func (d *Daemon) applyConfig(ctx context.Context, c config.Config, snap *nodewatch.Snapshot) {
	want := map[string]config.Pool{} // the device plugin's pools
	for _, p := range c.Pools {
		if !p.DRA() {
			want[p.Name] = p
		}
	}
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		np, ok := want[name]
		if ok && reflect.DeepEqual(np, p.pool) && c.ResourceName(np) == p.resource {
			continue
		}
		d.log.Info("stopping pool", "pool", name, "replaced", ok)
		p.close(!ok) // a replaced pool's spec is rewritten by its successor
		delete(d.pools, name)
		d.m.forgetPool(name)
		if p.pool.GPUAligned() && (!ok || !np.GPUAligned() || d.refusal(np) != "") {
			if err := removePoolFile(d.cfg.AllocDir, name); err != nil {
				d.log.Warn("pool no longer gpuAligned", "pool", name, "err", err)
			}
		}
	}
	d.conf = c
	var started []*poolServer
	for _, pool := range c.Pools {
		if _, ok := d.pools[pool.Name]; ok || pool.DRA() {
			continue
		}
		if d.refusal(pool) != "" {
			// Reported by assign. A pool file of an earlier run (the node
			// was in exclusive mode then) would have the CNI bind its NICs.
			if err := removePoolFile(d.cfg.AllocDir, pool.Name); err != nil {
				d.log.Warn("refused pool", "pool", pool.Name, "err", err)
			}
			continue
		}
		p := newPoolServer(pool, c.ResourceName(pool), d.cfg.KubeletDir, d.numa,
			allocContext{devRoot: d.cfg.DevRoot, cdi: d.cdi != nil, allocDir: d.cfg.AllocDir}, d.cdi, d.log, d.m)
		d.pools[pool.Name] = p
		started = append(started, p)
	}
	d.devGen = 0 // membership may have changed: hand every pool its devices
	d.push(snap)
	for _, p := range started {
		p.start(ctx)
	}
}

// push hands a snapshot to every pool. Pool membership (and CDI specs) are
// recomputed only when devices changed, not on every health change.
func (d *Daemon) push(snap *nodewatch.Snapshot) {
	members := snap.DevicesGen != d.devGen
	var assigned map[string][]discovery.RDMADevice
	if members {
		assigned = d.assign(snap)
	}
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		if members {
			p.setMembers(assigned[name])
		}
		healthy, unhealthy := p.setHealth(snap.Healthy)
		d.m.setDevices(name, healthy, unhealthy)
	}
	if members {
		d.draPools = map[string][]discovery.RDMADevice{}
		d.draNoNCCL = map[string]bool{}
		for _, p := range d.conf.Pools {
			if p.DRA() && d.refusal(p) == "" {
				d.draPools[p.Name] = append([]discovery.RDMADevice{}, assigned[p.Name]...)
				if !p.SetsNCCL() {
					d.draNoNCCL[p.Name] = true
				}
			}
		}
	}
	if d.cfg.DRA != nil {
		// Every snapshot: a health change is a taint change.
		if err := d.cfg.DRA.Publish(d.draPools, d.draNoNCCL, snap.Healthy); err != nil {
			d.log.Warn("publish dra pools", "err", err)
		}
	}
	d.devGen = snap.DevicesGen
	d.snap = snap
	d.publishState()
}

// assign maps devices to pools and records configuration problems.
func (d *Daemon) assign(snap *nodewatch.Snapshot) map[string][]discovery.RDMADevice {
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
	for _, pr := range problems {
		d.log.Warn("config problem", "problem", pr)
	}
	d.m.problems.Set(float64(len(problems)))
	d.stateMu.Lock()
	d.state.Problems = problems
	d.stateMu.Unlock()
	return assigned
}

// refusal says why a pool is not served on this node, "" when it is. A dra
// pool is refused when the daemon has no DRA front end. Otherwise only
// gpuAligned pools are refused: every container gets the device nodes of
// every NIC of the pool, and only the exclusive netns mode makes an RDMA
// device unusable outside the network namespace it is in.
func (d *Daemon) refusal(p config.Pool) string {
	if p.DRA() && d.cfg.DRA == nil {
		return fmt.Sprintf("pool %q has frontend dra but the daemon runs without the DRA front end; the pool is not served: "+
			"start it with --dra, or give the pool frontend devicePlugin", p.Name)
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

// kick forwards a kubelet event to the pool servers it concerns.
func (d *Daemon) kick(ev kubeletEvent) {
	for _, name := range sortedKeys(d.pools) {
		if ev.all || ev.socket == SocketName(name) {
			d.pools[name].kick()
		}
	}
}

// reload re-reads the config file; a bad file keeps the running config.
func (d *Daemon) reload(ctx context.Context) {
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
	d.applyConfig(ctx, c, snap)
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

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
