package nodewatch

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// A device listed in class/infiniband before its ports or char devices
// exist (a driver still probing, a VF being created) is retried by time,
// never by the number of scans: events may cause a hundred scans a second
// and must not use up a budget meant for a slow probe. Retries back off from
// retryFirst to retryMax while retryBudget lasts, then continue every
// retrySlow, so a device whose ports appear late is always picked up.
const (
	retryFirst  = 100 * time.Millisecond
	retryMax    = 2 * time.Second
	retryBudget = 30 * time.Second
	retrySlow   = 10 * time.Second
)

type retry struct {
	since, next time.Time
	wait        time.Duration
}

func newRetry(now time.Time) *retry {
	return &retry{since: now, next: now.Add(retryFirst), wait: retryFirst}
}

func (r *retry) due(now time.Time) bool { return !now.Before(r.next) }

// schedule sets the next attempt after one that failed at now; it reports
// whether the budget has just run out.
func (r *retry) schedule(now time.Time) (exhausted bool) {
	if now.Sub(r.since) < retryBudget {
		r.wait = min(2*r.wait, retryMax)
	} else {
		exhausted = r.wait != retrySlow
		r.wait = retrySlow
	}
	r.next = now.Add(r.wait)
	return exhausted
}

// retryDue reports whether a listed-but-unreadable device is due a scan.
func (w *Watcher) retryDue(now time.Time) bool {
	for _, r := range w.pending {
		if r.due(now) {
			return true
		}
	}
	return false
}

// rescan reads the whole node, reopens the port state files and publishes.
func (w *Watcher) rescan(now time.Time) error {
	if w.list == nil {
		w.list = discovery.OpenRDMAList(w.cfg.Scanner.SysRoot)
	}
	// The sum is taken before the scan: a device added in between makes the
	// next tick scan again.
	n, sum, err := w.list.Sum()
	if err != nil {
		return err
	}
	if w.afterSum != nil {
		w.afterSum()
	}
	names, err := discovery.ListRDMA(w.cfg.Scanner.SysRoot, nil)
	if err != nil {
		return err
	}
	node, err := w.cfg.Scanner.Scan()
	if err != nil {
		return fmt.Errorf("scan node: %w", err)
	}
	node.Affinity = nil // see Snapshot.Node
	for _, warn := range node.Warnings {
		w.log.Debug("scan warning", "warning", warn)
	}
	cur, _ := w.Latest()
	if cur != nil {
		w.logChanges(cur.Node, node)
	}
	w.track(now, names, node)
	w.listN, w.listSum = n, sum
	ports := make(map[string][]int, len(node.RDMADevices))
	for _, d := range node.RDMADevices {
		ps := make([]int, 0, len(d.Ports))
		for _, p := range d.Ports {
			ps = append(ps, p.Port)
		}
		ports[d.Name] = ps
	}
	w.states.Close()
	w.states = discovery.OpenPortStates(w.cfg.Scanner.SysRoot, ports)
	w.scratch = make(map[string]bool, len(ports))
	w.states.Read(w.scratch)
	w.healthDirty = false
	w.publish(now, node, maps.Clone(w.scratch), true)
	return nil
}

// track updates the retries of devices that are listed but were not read
// whole (no ports or no char devices yet).
func (w *Watcher) track(now time.Time, names []string, node *discovery.Node) {
	whole := make(map[string]bool, len(node.RDMADevices))
	for _, d := range node.RDMADevices {
		whole[d.Name] = len(d.Ports) > 0 && len(d.CharDevices) > 0
	}
	for name := range w.pending {
		if _, listed := slices.BinarySearch(names, name); !listed || whole[name] {
			if listed {
				w.log.Info("rdma device readable", "device", name, "after", now.Sub(w.pending[name].since).Round(time.Millisecond))
			}
			delete(w.pending, name)
		}
	}
	for _, name := range names {
		if whole[name] {
			continue
		}
		r, ok := w.pending[name]
		switch {
		case !ok:
			w.pending[name] = newRetry(now)
			w.log.Info("rdma device listed but not readable yet; retrying", "device", name)
		case r.due(now):
			if r.schedule(now) {
				w.log.Warn("rdma device still cannot be read; retrying slowly", "device", name,
					"after", now.Sub(r.since).Round(time.Second), "every", retrySlow)
			}
		}
	}
}

func (w *Watcher) logChanges(old, node *discovery.Node) {
	before := map[string]bool{}
	for _, x := range old.RDMADevices {
		before[x.Name] = true
	}
	for _, x := range node.RDMADevices {
		if !before[x.Name] {
			w.log.Info("rdma device appeared", "device", x.Name, "pci", x.PCIAddress)
		}
		delete(before, x.Name)
	}
	for name := range before {
		w.log.Info("rdma device disappeared", "device", name)
	}
}
