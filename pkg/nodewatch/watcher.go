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

// DefaultGIDEvery is how many ticks pass between GID table re-reads that no
// event asked for. GID slots change when addresses change, and address and
// link events trigger a re-read at once; the periodic one only catches an
// event that was missed (a subscription that failed). Re-reading the ports
// of the 1,024-device synthetic node costs about as much as 25 health ticks
// (measured with BenchmarkTick/BenchmarkRereadGIDs), so doing it every tick
// would make the idle daemon's CPU use ~25 times higher; every 20th tick
// (10 s) keeps it at a fraction of the health reads.
const DefaultGIDEvery = 20

// minGIDGap bounds how often events re-read GID tables: a storm of link
// events (pods starting, each with a veth pair) causes at most one re-read
// per gap.
const minGIDGap = 200 * time.Millisecond

// EventSource pokes the watcher when something may have changed on the
// node, so it re-reads at once instead of at the next tick.
type EventSource interface {
	// Run calls poke on each event until ctx ends.
	Run(ctx context.Context, poke func()) error
}

// Config says what to watch and how often.
type Config struct {
	Scanner discovery.Scanner
	// Interval is the presence and health re-read period; 0 is DefaultInterval.
	Interval time.Duration
	// GIDEvery is how many ticks pass between unprompted GID re-reads; 0
	// is DefaultGIDEvery.
	GIDEvery int
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
	names    []string // class/infiniband at the last full scan
	buf      []string
	pending  map[string]*retry // listed but not readable yet
	gone     *retry            // a state read failed with unchanged names
	states   *discovery.PortStates
	scratch  map[string]bool
	ticks    int
	gidDirty bool
	lastGID  time.Time
	now      func() time.Time
}

// New returns a watcher; Scan reads the node for the first time, Run keeps
// it current.
func New(cfg Config) *Watcher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.GIDEvery <= 0 {
		cfg.GIDEvery = DefaultGIDEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}),
		pending: map[string]*retry{}, now: time.Now}
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
// Interval and on every event, full scans when devices come or go.
func (w *Watcher) Run(ctx context.Context) error {
	defer w.states.Close()
	if cur, _ := w.Latest(); cur == nil {
		if err := w.Scan(); err != nil {
			return err
		}
	}
	pokes := make(chan struct{}, 1)
	poke := func() {
		select {
		case pokes <- struct{}{}:
		default:
		}
	}
	for _, src := range w.cfg.Events {
		go func() {
			if err := src.Run(ctx, poke); err != nil && ctx.Err() == nil {
				w.log.Warn("event source stopped; relying on the periodic re-read", "err", err)
			}
		}()
	}
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	gidTimer := time.NewTimer(time.Hour)
	gidTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.ticks++
			if w.ticks%w.cfg.GIDEvery == 0 {
				w.gidDirty = true
			}
		case <-pokes:
			w.gidDirty = true
		case <-gidTimer.C:
		}
		now := w.now()
		if w.gidDirty && now.Sub(w.lastGID) < minGIDGap {
			// Too soon after the last re-read: do the health part now and
			// the GID part when the gap has passed.
			gidTimer.Reset(minGIDGap - now.Sub(w.lastGID))
			w.refresh(now, false)
			continue
		}
		w.refresh(now, w.gidDirty)
	}
}

// refresh does the cheap re-read: a presence change or a due retry means a
// full scan, otherwise port states (and, with gids, every device's ports)
// are compared with the current snapshot.
func (w *Watcher) refresh(now time.Time, gids bool) {
	names, err := discovery.ListRDMA(w.cfg.Scanner.SysRoot, w.buf)
	if err != nil {
		w.log.Warn("re-read rdma devices", "err", err)
		return
	}
	w.buf = names
	if !slices.Equal(names, w.names) || w.retryDue(now) {
		if err := w.rescan(now); err != nil {
			w.log.Warn("rescan", "err", err)
		}
		return
	}
	gone := w.states.Read(w.scratch)
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
	node := cur.Node
	devicesChanged := false
	if gids {
		w.gidDirty, w.lastGID = false, now
		node, devicesChanged = w.rereadPorts(cur.Node)
	}
	if !devicesChanged && maps.Equal(w.scratch, cur.Healthy) {
		return
	}
	for name, ok := range w.scratch {
		if cur.Healthy[name] != ok {
			w.log.Info("device health changed", "device", name, "healthy", ok)
		}
	}
	w.publish(node, maps.Clone(w.scratch), devicesChanged)
}

// rereadPorts re-reads every device's ports; it returns a new node when any
// changed (the published one is never modified).
func (w *Watcher) rereadPorts(n *discovery.Node) (*discovery.Node, bool) {
	var devs []discovery.RDMADevice
	for i, d := range n.RDMADevices {
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

// publish makes a new snapshot current and wakes every consumer.
func (w *Watcher) publish(node *discovery.Node, health map[string]bool, devicesChanged bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := &Snapshot{Node: node, Healthy: health}
	if w.cur != nil {
		s.Gen, s.DevicesGen = w.cur.Gen+1, w.cur.DevicesGen
	}
	if devicesChanged || w.cur == nil {
		s.DevicesGen++
	}
	w.cur = s
	close(w.changed)
	w.changed = make(chan struct{})
}
