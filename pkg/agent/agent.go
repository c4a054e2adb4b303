// Package agent is the kube-rdma node agent: it owns the pools config
// (pkg/agent/config, loaded and reloaded), the node watcher's wiring
// (pkg/nodewatch), the view of what is served (View, for the node-state
// publisher and the NRI plugin), the status server (/metrics, /state,
// /healthz), its metrics, the RDMA netns mode, and the garbage collection of
// gpuAligned allocation directories.
//
// The pools reach the kubelet through front ends behind one interface
// (FrontEnd): the device plugin (pkg/deviceplugin) and the DRA driver
// (pkg/dra). Agent.Run assigns devices to pools and hands each front end
// its pools, their members and the node's health with every snapshot; a
// front end answers with errors and its status only.
//
// It imports no front end and no observer (pkg/deviceplugin, pkg/dra,
// pkg/nri, pkg/nodestate: internal/importrules); cmd/device-plugin wires them
// in. It reads the node only through pkg/discovery (via the watcher) under
// roots given in Config, so it runs unprivileged on fixture trees, and
// learns which devices pods' network namespaces hide from it through
// Config.Lent (lent.go); it never chooses devices itself and keeps no
// package-level state.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// DefaultHealthInterval is how often port states and presence are re-read:
// half the 1 s the kubelet should wait at most to learn of a change.
const DefaultHealthInterval = nodewatch.DefaultInterval

// EventSource pokes the node watcher when something may have changed on the
// node, so it re-reads sysfs at once instead of at the next tick.
type EventSource = nodewatch.EventSource

// Config is everything the agent needs; cmd/device-plugin fills it from flags.
type Config struct {
	// ConfigFile is the pools file (YAML or JSON); "" uses config.Default.
	ConfigFile string
	SysRoot    string
	ProcRoot   string
	// AllocDir is the host directory of gpuAligned pools (pool files and
	// allocation directories, docs/gpu-aligned.md), the device plugin
	// front end's --alloc-dir: the agent sweeps its allocation
	// directories. "" refuses gpuAligned pools.
	AllocDir string
	// PoolsFile is the node's pools file (package nodepools), rewritten
	// when the served pools or their members change; "" writes none.
	PoolsFile string
	// Uninstalling, when set, reports whether the chart is being
	// uninstalled (the CNI plugin's uninstall marker, which `kube-rdma
	// uninstall` writes and a restart or an upgrade never does): from its
	// first true on, checked with every write and every FilesInterval, the
	// agent removes the pools file and writes it no more, so that helm
	// uninstall leaves none behind however its hook and the daemon's exit
	// interleave. A new process (an uninstall given up, then an upgrade)
	// writes it again.
	Uninstalling func() bool
	// Allocations lists the kubelet's allocations, for removing allocation
	// directories no container holds; nil: they are never removed.
	Allocations AllocationLister
	// AllocGCInterval and AllocGCGrace: how often allocation directories
	// are swept, and how young one is kept anyway; 0 means the defaults.
	AllocGCInterval, AllocGCGrace time.Duration
	// FilesInterval is how often the files the CNI plugin reads (the pools
	// file, the front ends' through FileKeeper) are checked and written
	// again when missing: a reader moves a torn one aside (docs/cni.md,
	// "Torn records"); 0 means DefaultFilesInterval.
	FilesInterval time.Duration
	// QuarantineDirs maps a kind of contract file ("attachment", "claim")
	// to the directory its readers move torn ones into, for the gauge
	// kube_rdma_device_plugin_quarantined_files{kind}; the alloc dir's
	// (kinds "pool" and "pools") are added from AllocDir and PoolsFile.
	QuarantineDirs map[string]string
	// MetricsAddr is the HTTP address of /metrics and /state; "" disables it.
	MetricsAddr string
	// StatusAuth wraps the handlers of /metrics and /state, not /healthz
	// (pkg/statusauth's Filter.Wrap); nil serves them to anyone.
	StatusAuth func(http.Handler) http.Handler
	NodeName   string
	// HealthInterval is the sysfs re-read period; 0 means DefaultHealthInterval.
	HealthInterval time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// NetnsMode defaults to NetlinkNetnsMode.
	NetnsMode NetnsModeReader
	// FrontEnds serve the pools, by their frontend (config.Pool.Frontend;
	// "" is config.DevicePlugin): pkg/deviceplugin's and pkg/dra's. A pool
	// whose front end is missing is refused. A front end that is also a
	// prometheus.Collector has its series on /metrics.
	FrontEnds map[config.Frontend]FrontEnd
	// Lent says which RDMA devices are in pods' network namespaces, where
	// the host does not see them (the exclusive RDMA netns mode): they stay
	// members of their pools, as last seen, until their records go. nil:
	// none is; a device the watcher no longer sees is dropped after a
	// grace of two HealthIntervals.
	Lent LentDevices
	// LentFile is where the devices Lent says are lent are kept, as last
	// seen, across restarts of the daemon (the agent alone writes it;
	// removed when none is lent and once the chart is being uninstalled).
	// "" keeps nothing: a restarted daemon then no longer lists a device
	// already in a pod until the pod gives it back.
	LentFile string
	// Events trigger an immediate re-read; nil means link and address
	// updates in the agent's network namespace (nodewatch.Netlink). Use an
	// empty, non-nil slice for none. Changes of class/infiniband are always
	// watched.
	Events []EventSource
}

// nodeSource is what the agent needs from the node watcher.
type nodeSource interface {
	Latest() (*nodewatch.Snapshot, <-chan struct{})
}

// Agent is one running node agent: it loads the pools config, runs the
// node watcher, assigns devices to pools and drives the front ends with
// every snapshot, and serves its view, /state and /metrics.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	scanner discovery.Scanner
	status  *statusServer
	watcher *nodewatch.Watcher
	ready   chan struct{}
	stopped sync.Once // the front ends' Stop, once

	// Owned by the Run goroutine.
	conf     config.Config
	confData []byte
	node     nodeSource
	devGen   uint64 // DevicesGen of the last snapshot handed to the front ends
	// pools are the configured pools as last handed to their front ends.
	pools map[config.Frontend][]Assignment
	// status is each front end's status after the last Update.
	feStatus map[config.Frontend][]PoolStatus
	// gauged are the pools with device gauges.
	gauged    map[string]bool
	numa      int
	poolsFile poolsFile // the node's pools file, for the CNI plugin

	snap *nodewatch.Snapshot // the last one handed to the pools, lent devices added
	raw  *nodewatch.Snapshot // the watcher's snapshot snap was made from
	lent *lentKeeper

	nodeStateReport func() any // set before Run
	nriReport       func() any // set before Run

	stateMu     sync.Mutex
	state       State
	view        View
	viewChanged chan struct{}
}

// New checks the configuration, loads the pools file and opens the metrics
// listener; Run does the rest.
func New(cfg Config) (*Agent, error) {
	if cfg.SysRoot == "" {
		return nil, errors.New("agent: sysfs root is required")
	}
	if cfg.HealthInterval <= 0 {
		cfg.HealthInterval = DefaultHealthInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AllocGCInterval <= 0 {
		cfg.AllocGCInterval = DefaultAllocGCInterval
	}
	if cfg.AllocGCGrace <= 0 {
		cfg.AllocGCGrace = DefaultAllocGCGrace
	}
	if cfg.FilesInterval <= 0 {
		cfg.FilesInterval = DefaultFilesInterval
	}
	if cfg.NetnsMode == nil {
		cfg.NetnsMode = NetlinkNetnsMode{}
	}
	if cfg.Events == nil {
		cfg.Events = []EventSource{nodewatch.Netlink{}}
	}
	d := &Agent{
		cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), viewChanged: make(chan struct{}), gauged: map[string]bool{},
		scanner: discovery.Scanner{SysRoot: cfg.SysRoot, ProcRoot: cfg.ProcRoot},
		lent:    newLentKeeper(cfg.Lent, lentGrace(cfg.HealthInterval), cfg.Logger, cfg.LentFile),
	}
	counters := &portCounters{sysRoot: cfg.SysRoot}
	d.m = newMetrics(counters)
	d.m.reg.MustRegister(newQuarantined(cfg))
	for _, name := range sortedKeys(cfg.FrontEnds) {
		if c, ok := cfg.FrontEnds[name].(prometheus.Collector); ok {
			if err := d.RegisterCollector(c); err != nil {
				return nil, fmt.Errorf("front end %s: %w", name, err)
			}
		}
	}
	var err error
	if d.conf, d.confData, err = config.Load(cfg.ConfigFile); err != nil {
		return nil, err
	}
	d.m.reload(true)
	if cfg.MetricsAddr != "" {
		l, err := listenStatus(cfg.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("listen for metrics: %w", err)
		}
		d.status = &statusServer{listener: l, m: d.m, state: d.State, ready: d.ready, auth: cfg.StatusAuth}
	}
	d.watcher = nodewatch.New(nodewatch.Config{
		Scanner: d.scanner, Interval: cfg.HealthInterval, Logger: cfg.Logger,
		Events: append([]EventSource{nodewatch.ClassDir{SysRoot: cfg.SysRoot}}, cfg.Events...),
	})
	d.node = d.watcher
	counters.node = d.watcher
	return d, nil
}

// MetricsAddr is the metrics listener's address ("" when disabled).
func (d *Agent) MetricsAddr() string {
	if d.status == nil {
		return ""
	}
	return d.status.listener.Addr().String()
}

// Ready is closed once the first scan is done and every pool is served.
func (d *Agent) Ready() <-chan struct{} { return d.ready }

// Config returns the configuration the agent runs with, defaults filled in.
func (d *Agent) Config() Config { return d.cfg }

// Run is New then Agent.Run.
func Run(ctx context.Context, cfg Config) error {
	d, err := New(cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Run serves until ctx ends, then stops every front end (the device
// plugin removes its sockets and CDI specs).
func (d *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.status != nil {
		d.status.start()
		defer d.status.close()
	}
	defer d.stopFrontEnds(cancel)
	d.readNetnsMode()
	d.numa = d.scanner.NUMANodes()
	if err := d.watcher.Scan(); err != nil {
		return err
	}
	for _, name := range sortedKeys(d.cfg.FrontEnds) {
		if err := d.cfg.FrontEnds[name].Start(ctx, Node{NUMANodes: d.numa}); err != nil {
			return err
		}
	}
	confEvents, stopConf, err := watchConfig(d.cfg.ConfigFile)
	if err != nil {
		return err
	}
	defer stopConf()
	watcherDone := make(chan error, 1)
	go func() { watcherDone <- d.watcher.Run(ctx) }()
	defer func() {
		cancel()
		// nil in practice: Run fails only without a first scan, done above.
		if err := <-watcherDone; err != nil {
			d.log.Error("node watcher stopped", "err", err)
		}
	}()

	refusals := d.watchRefusals(ctx)
	snap, changed := d.node.Latest()
	d.applyConfig(d.conf, snap)
	d.log.Info("device plugin started", "node", d.cfg.NodeName, "pools", len(d.conf.Pools),
		"rdmaDevices", len(snap.Node.RDMADevices), "rdmaNetnsMode", d.stateNetns(), "healthInterval", d.cfg.HealthInterval)
	if d.cfg.Allocations != nil && d.cfg.AllocDir != "" {
		sw := allocSweeper{root: d.cfg.AllocDir, lister: d.cfg.Allocations, interval: d.cfg.AllocGCInterval,
			grace: d.cfg.AllocGCGrace, log: d.log, view: func() View { v, _ := d.View(); return v }}
		swept := make(chan struct{})
		go func() { defer close(swept); sw.run(ctx) }()
		defer func() { cancel(); <-swept }()
	}
	close(d.ready)
	// The first scan's garbage (every sysfs string read, a thousand
	// devices' worth on a big node) would otherwise stay in RSS until the
	// background scavenger returns it, minutes later.
	debug.FreeOSMemory()
	files := time.NewTicker(d.cfg.FilesInterval)
	defer files.Stop()
	// wake ends the grace of a device the watcher no longer sees.
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		if at, ok := d.lent.wake(); ok {
			wake.Reset(time.Until(at))
		} else {
			wake.Stop()
		}
		select {
		case <-ctx.Done():
			d.log.Info("device plugin stopping")
			// The front ends first (sockets and CDI specs removed), before the
			// waits for the node watcher and the sweeper below: the kubelet
			// kills a container its grace period after SIGTERM, and a spec left
			// by a killed daemon stays on the node (the rxe-cluster e2e found
			// one after helm uninstall, its daemon killed 37 s after SIGTERM).
			d.stopFrontEnds(cancel)
			return nil
		case <-changed:
			snap, changed = d.node.Latest()
			d.push(snap)
		case <-confEvents:
			d.reload()
		case <-refusals:
			d.log.Info("a front end's refusals changed; pools handed out again")
			d.applyConfig(d.conf, d.raw)
		case <-files.C:
			d.restoreFiles()
			if d.lent.missing() {
				d.push(d.raw) // a record that went while its device stays away
			}
		case <-wake.C:
			d.push(d.raw)
		}
	}
}

// watchRefusals returns a channel that gets a value when a front end's
// refusals change (PoolRefuser), until ctx ends.
func (d *Agent) watchRefusals(ctx context.Context) <-chan struct{} {
	poke := make(chan struct{}, 1)
	for _, name := range sortedKeys(d.cfg.FrontEnds) {
		r, ok := d.cfg.FrontEnds[name].(PoolRefuser)
		if !ok {
			continue
		}
		// Taken now, before the first applyConfig asks Refusal: a change
		// after that closes this channel.
		ch := r.Refusals()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
				}
				ch = r.Refusals()
				select {
				case poke <- struct{}{}:
				default:
				}
			}
		}()
	}
	return poke
}

func (d *Agent) readNetnsMode() {
	mode, err := d.cfg.NetnsMode.NetnsMode()
	if err != nil || (mode != rdma.NetnsShared && mode != rdma.NetnsExclusive) {
		d.log.Warn("rdma netns mode unknown", "err", err, "mode", mode)
		mode = rdma.NetnsUnknown
	}
	d.m.setNetnsMode(mode)
	d.stateMu.Lock()
	d.state.RDMANetnsMode = mode
	d.stateMu.Unlock()
}

func (d *Agent) stateNetns() rdma.NetnsMode {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.state.RDMANetnsMode
}

// stopFrontEnds ends ctx (the front ends' loops) and stops every front
// end; a normal exit removes the device plugin's sockets and CDI specs.
func (d *Agent) stopFrontEnds(cancel context.CancelFunc) {
	cancel()
	d.stopped.Do(func() {
		for _, name := range sortedKeys(d.cfg.FrontEnds) {
			d.cfg.FrontEnds[name].Stop()
		}
	})
}
