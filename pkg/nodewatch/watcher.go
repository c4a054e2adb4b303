package nodewatch

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// DefaultInterval is how often port states and presence are re-read: half
// the 1 s the kubelet should wait at most to learn of a change.
const DefaultInterval = 500 * time.Millisecond

// GID tables change when addresses change; address and link events about a
// device's netdev re-read its ports at once. As a safety net for a missed
// event (a subscription that failed, a netdev in another namespace) the
// ticks also re-read the ports of the devices in turn, one device per tick
// on average, so a full sweep takes one Interval per device (8.5 minutes on
// a 1,024-device node, 4 s on an 8-NIC node). Re-reading every device's
// ports costs about 60 health ticks on the 1,024-device fixture
// (BenchmarkRereadGIDs against BenchmarkTick): doing that every 10 s tripled
// the idle daemon's CPU; one device per tick adds about 1/1000 of a tick.
// They are read sweepBatch at a time every sweepBatch-th tick: the other
// ticks make only raw system calls (pkg/discovery/raw_linux.go), which do
// not wake the Go runtime's monitor thread; a re-read's ordinary calls do.

// sweepBatch is how many devices' ports one sweeping tick re-reads, every
// sweepBatch-th tick.
const sweepBatch = 8

// minEventGap bounds how often events cause a re-read: a storm of events
// causes at most one re-read per gap. Events about netdevs that belong to
// no RDMA device (pods' veth pairs on a busy node) cause none.
const minEventGap = 100 * time.Millisecond

// Event says something may have changed on the node.
type Event struct {
	// Netdev is the network interface the event is about (a link or
	// address update); "" means unknown: every device is re-read.
	Netdev string
}

// EventSource pokes the watcher when something may have changed on the
// node, so it re-reads at once instead of at the next tick.
type EventSource interface {
	// Run calls poke on each event until ctx ends.
	Run(ctx context.Context, poke func(Event)) error
}

// Config says what to watch and how often.
type Config struct {
	Scanner discovery.Scanner
	// Interval is the presence and health re-read period; 0 is DefaultInterval.
	Interval time.Duration
	Events   []EventSource
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// Watcher keeps the node picture current and publishes snapshots.
type Watcher struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	cur     *Snapshot
	changed chan struct{} // closed and replaced on every publish

	// Owned by Run (and Scan before Run starts).
	list     *discovery.RDMAList
	listN    int               // entries in class/infiniband at the last full scan
	listSum  uint64            // and the hash of their entries
	afterSum func()            // a test's hook between rescan's Sum and its scan
	pending  map[string]*retry // listed but not readable yet
	gone     *retry            // a state read failed with unchanged names
	states   *discovery.PortStates
	scratch  map[string]bool
	// healthDirty: a Poll saw a health change not published yet.
	healthDirty bool
	sweep       int              // the device whose ports the sweep re-reads next
	ticks       int              // ticks so far
	netdevs     map[string][]int // netdev -> indexes in the snapshot's RDMADevices
	last        time.Time        // of the last re-read

	evMu     sync.Mutex
	evAll    bool            // an event about an unknown netdev is pending
	evNames  map[string]bool // netdevs with pending events
	evSignal chan struct{}

	now func() time.Time
}

// New returns a watcher; Scan reads the node for the first time, Run keeps
// it current.
func New(cfg Config) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}),
		pending: map[string]*retry{}, evNames: map[string]bool{}, evSignal: make(chan struct{}, 1), now: time.Now}
}

// Latest returns the current snapshot (nil before the first Scan) and a
// channel closed when a newer one is published.
func (w *Watcher) Latest() (*Snapshot, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur, w.changed
}

// Scan reads the whole node and publishes the first snapshot. It fails only
// when the roots are unusable.
func (w *Watcher) Scan() error { return w.rescan(w.now()) }

// Run keeps the snapshot current until ctx ends: a cheap re-read every
// Interval and on events, full scans when devices come or go.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.states.Close()
	defer w.list.Close()
	if cur, _ := w.Latest(); cur == nil {
		if err := w.Scan(); err != nil {
			return err
		}
	}
	for _, src := range w.cfg.Events {
		go func() {
			if err := src.Run(ctx, w.poke); err != nil && ctx.Err() == nil {
				w.log.Warn("event source stopped; relying on the periodic re-read", "err", err)
			}
		}()
	}
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	gap := time.NewTimer(time.Hour)
	gap.Stop()
	var req gidRequest
	for {
		ticked := false
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			ticked = true
			w.ticks++
			if cur, _ := w.Latest(); len(cur.Node.RDMADevices) > 0 && w.ticks%sweepBatch == 0 {
				for range min(sweepBatch, len(cur.Node.RDMADevices)) {
					req.add(w.sweep % len(cur.Node.RDMADevices))
					w.sweep++
				}
			}
		case <-w.evSignal:
			if !w.takeEvents(&req) {
				continue // about netdevs of no RDMA device
			}
		case <-gap.C:
		}
		now := w.now()
		if !ticked && now.Sub(w.last) < minEventGap {
			gap.Reset(minEventGap - now.Sub(w.last))
			continue
		}
		w.last = now
		w.refresh(now, req)
		req = gidRequest{}
	}
}

// gidRequest says whose ports and GID tables a refresh re-reads.
type gidRequest struct {
	all  bool
	devs map[int]bool // indexes in the snapshot's RDMADevices
}

func (r *gidRequest) add(i int) {
	if r.devs == nil {
		r.devs = map[int]bool{}
	}
	r.devs[i] = true
}

func (w *Watcher) poke(ev Event) {
	w.evMu.Lock()
	if ev.Netdev == "" {
		w.evAll = true
	} else {
		w.evNames[ev.Netdev] = true
	}
	w.evMu.Unlock()
	select {
	case w.evSignal <- struct{}{}:
	default:
	}
}

// takeEvents moves pending events into req; it reports whether any concerns
// an RDMA device (or an unknown netdev).
func (w *Watcher) takeEvents(req *gidRequest) bool {
	w.evMu.Lock()
	all, names := w.evAll, w.evNames
	w.evAll, w.evNames = false, map[string]bool{}
	w.evMu.Unlock()
	if all {
		req.all = true
		return true
	}
	ours := false
	for n := range names {
		for _, i := range w.netdevs[n] {
			req.add(i)
			ours = true
		}
	}
	return ours
}

// refresh does the cheap re-read: a presence change or a due retry means a
// full scan, otherwise port states (and the ports of the devices req names)
// are compared with the current snapshot.
func (w *Watcher) refresh(now time.Time, req gidRequest) {
	n, sum, err := w.list.Sum()
	if err != nil {
		w.log.Warn("re-read rdma devices", "err", err)
		return
	}
	if n != w.listN || sum != w.listSum || w.retryDue(now) {
		if err := w.rescan(now); err != nil {
			w.log.Warn("rescan", "err", err)
		}
		return
	}
	healthChanged, gone := w.states.Poll()
	// A change this refresh does not publish (it rescans instead, and the
	// rescan may fail) is published by a later one.
	w.healthDirty = w.healthDirty || healthChanged
	// A failed read is a device removed and re-added between two ticks (a
	// fast driver reload) or a broken one: scan again, with backoff.
	if gone {
		if w.gone == nil {
			w.gone = newRetry(now)
			w.gone.next = now
		}
		if w.gone.due(now) {
			w.gone.schedule(now)
			if err := w.rescan(now); err != nil {
				w.log.Warn("rescan", "err", err)
			}
			return
		}
	} else {
		w.gone = nil
	}
	cur, _ := w.Latest()
	node, devicesChanged := cur.Node, false
	if req.all || len(req.devs) > 0 {
		node, devicesChanged = w.rereadPorts(cur.Node, req)
	}
	if !devicesChanged && !w.healthDirty {
		return
	}
	w.healthDirty = false
	w.states.Health(w.scratch)
	for name, ok := range w.scratch {
		if cur.Healthy[name] != ok {
			w.log.Info("device health changed", "device", name, "healthy", ok)
		}
	}
	w.publish(now, node, maps.Clone(w.scratch), devicesChanged)
}

// rereadPorts re-reads every device's ports; it returns a new node when any
// changed (the published one is never modified).
func (w *Watcher) rereadPorts(n *discovery.Node, req gidRequest) (*discovery.Node, bool) {
	var devs []discovery.RDMADevice
	for i, d := range n.RDMADevices {
		if !req.all && !req.devs[i] {
			continue
		}
		nd, err := w.cfg.Scanner.RereadPorts(d)
		if err != nil {
			continue // removed meanwhile: the next presence check scans
		}
		if equalPorts(d, nd) {
			continue
		}
		if devs == nil {
			devs = slices.Clone(n.RDMADevices)
		}
		devs[i] = nd
		w.log.Info("rdma device ports changed", "device", d.Name)
	}
	if devs == nil {
		return n, false
	}
	out := *n
	out.RDMADevices = devs
	return &out, true
}

func equalPorts(a, b discovery.RDMADevice) bool {
	return a.LinkLayer == b.LinkLayer && slices.Equal(a.Netdevs, b.Netdevs) &&
		slices.EqualFunc(a.Ports, b.Ports, func(x, y discovery.Port) bool {
			return x.Port == y.Port && x.LinkLayer == y.LinkLayer && x.Netdev == y.Netdev && x.Rate == y.Rate &&
				slices.Equal(x.GIDs, y.GIDs) && slices.Equal(x.RoCEv2GIDIndexes, y.RoCEv2GIDIndexes)
		})
}

// publish makes a new snapshot current and wakes every consumer; now is
// when the re-read or scan that found it started.
func (w *Watcher) publish(now time.Time, node *discovery.Node, health map[string]bool, devicesChanged bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &Snapshot{Node: node, Healthy: health, HealthSince: make(map[string]time.Time, len(health))}
	for name, ok := range health {
		s.HealthSince[name] = now
		if w.cur == nil {
			continue
		}
		if was, seen := w.cur.Healthy[name]; seen && was == ok {
			if t, set := w.cur.HealthSince[name]; set {
				s.HealthSince[name] = t
			}
		}
	}
	if w.cur != nil {
		s.Gen, s.DevicesGen = w.cur.Gen+1, w.cur.DevicesGen
	}
	if devicesChanged || w.cur == nil {
		s.DevicesGen++
	}
	w.cur = s
	if devicesChanged || w.netdevs == nil {
		w.netdevs = netdevIndex(node)
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// netdevIndex maps every netdev name a device mentions (its netdevs, its
// ports' and their GIDs') to the device's index.
func netdevIndex(n *discovery.Node) map[string][]int {
	out := map[string][]int{}
	add := func(name string, i int) {
		if name != "" && !slices.Contains(out[name], i) {
			out[name] = append(out[name], i)
		}
	}
	for i, d := range n.RDMADevices {
		for _, nd := range d.Netdevs {
			add(nd, i)
		}
		for _, p := range d.Ports {
			add(p.Netdev, i)
			for _, g := range p.GIDs {
				add(g.Netdev, i)
			}
		}
	}
	return out
}
