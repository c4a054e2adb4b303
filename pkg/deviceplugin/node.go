package deviceplugin

import (
	"fmt"
	"maps"

	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// refresh does the cheap re-read: a presence change means a full scan,
// otherwise only port states are compared.
func (d *Daemon) refresh() {
	links, err := readPresence(d.cfg.SysRoot)
	if err != nil {
		d.log.Warn("re-read rdma devices", "err", err)
		return
	}
	if !maps.Equal(links, d.present) {
		d.failedReads = 0
		if err := d.rescan(); err != nil {
			d.log.Warn("rescan", "err", err)
			return
		}
		d.push(true)
		return
	}
	health, gone := d.hr.read()
	// A failed read is a device removed and re-added between two ticks (a
	// fast driver reload) or a broken one; rescan, a bounded number of
	// times while the names stay the same.
	if gone && d.failedReads < maxRescans {
		d.failedReads++
		if err := d.rescan(); err != nil {
			d.log.Warn("rescan", "err", err)
			return
		}
		d.push(true)
		return
	}
	if !gone {
		d.failedReads = 0
	}
	if !maps.Equal(health, d.health) {
		for name, ok := range health {
			if d.health[name] != ok {
				d.log.Info("device health changed", "device", name, "healthy", ok)
			}
		}
		d.health = health
		d.push(false)
	}
}

// rescan reads the whole node and reassigns devices to pools.
func (d *Daemon) rescan() error {
	links, err := readPresence(d.cfg.SysRoot)
	if err != nil {
		return err
	}
	node, err := d.scanner.Scan()
	if err != nil {
		return fmt.Errorf("scan node: %w", err)
	}
	for _, w := range node.Warnings {
		d.log.Debug("scan warning", "warning", w)
	}
	if d.node != nil {
		old := map[string]bool{}
		for _, x := range d.node.RDMADevices {
			old[x.Name] = true
		}
		for _, x := range node.RDMADevices {
			if !old[x.Name] {
				d.log.Info("rdma device appeared", "device", x.Name, "pci", x.PCIAddress)
			}
			delete(old, x.Name)
		}
		for name := range old {
			d.log.Info("rdma device disappeared", "device", name)
		}
	}
	// A device listed but not scanned, or scanned before its ports or char
	// devices appeared (the class link comes first while a driver probes),
	// is left out of present so the next tick scans again, a bounded number
	// of times.
	scanned := map[string]bool{}
	for _, x := range node.RDMADevices {
		scanned[x.Name] = len(x.Ports) > 0 && len(x.CharDevices) > 0
	}
	for name := range d.unread {
		if _, ok := links[name]; !ok {
			delete(d.unread, name)
		}
	}
	for name := range links {
		if scanned[name] {
			delete(d.unread, name)
			continue
		}
		d.unread[name]++
		if d.unread[name] <= maxRescans {
			delete(links, name)
		} else if d.unread[name] == maxRescans+1 {
			d.log.Warn("rdma device cannot be read; giving up until it is removed and added again", "device", name)
		}
	}
	d.node, d.present = node, links
	d.ports = portsOf(node.RDMADevices)
	d.hr.reset(d.ports)
	d.health, _ = d.hr.read()
	d.counters.setPorts(d.ports)
	return nil
}

// assign maps devices to pools and records configuration problems.
func (d *Daemon) assign() {
	var problems []string
	assigned, err := d.conf.Assign(d.node.RDMADevices)
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
	for _, pr := range problems {
		d.log.Warn("config problem", "problem", pr)
	}
	d.assigned = assigned
	d.m.problems.Set(float64(len(problems)))
	d.stateMu.Lock()
	d.state.Problems = problems
	d.stateMu.Unlock()
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

// push sends the current devices to every pool; with members true the
// membership may have changed (CDI specs are rewritten and problems re-checked).
func (d *Daemon) push(members bool) {
	if members {
		d.assign()
	}
	for _, name := range sortedKeys(d.pools) {
		p := d.pools[name]
		devs := d.assigned[name]
		p.update(devs, d.health)
		healthy, unhealthy := 0, 0
		for _, x := range p.current().devices {
			if x.Health == "Healthy" {
				healthy++
			} else {
				unhealthy++
			}
		}
		d.m.setDevices(name, healthy, unhealthy)
		if members && d.cdi != nil {
			if err := d.cdi.write(p.pool, p.resource, devs); err != nil {
				d.log.Warn("write cdi spec", "pool", name, "err", err)
			}
		}
	}
	d.publishState()
}
