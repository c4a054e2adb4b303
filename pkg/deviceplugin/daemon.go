// Package deviceplugin is the kubelet device plugin daemon: it advertises
// RDMA devices as extended resources, one socket and one resource per
// configured pool (pkg/deviceplugin/config), with health from the real port
// state and presence, NUMA topology, PCIe-aware preferred allocation
// (pkg/allocator), Allocate responses with device nodes, NCCL environment and
// optional CDI devices, config reload, and Prometheus metrics.
//
// It is a few owners wired by Daemon.Run: the node watcher (pkg/nodewatch)
// publishes snapshots of the node; one poolServer per pool serves its socket
// and owns its registration with the kubelet; a kubeletWatcher tells pool
// servers when the kubelet restarted; a statusServer serves /metrics, /state
// and /healthz. Daemon.Run loads the config, starts and replaces pool
// servers, and hands each snapshot to them.
//
// It reads the node only through pkg/discovery (via the watcher) under roots
// given in Config, so it runs unprivileged on fixture trees; it never chooses
// devices itself (pkg/allocator does) and keeps no package-level state.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
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

// Config is everything the daemon needs; cmd/device-plugin fills it from flags.
type Config struct {
	// ConfigFile is the pools file (YAML or JSON); "" uses config.Default.
	ConfigFile string
	// KubeletDir is the kubelet's device plugin directory.
	KubeletDir string
	SysRoot    string
	ProcRoot   string
	// DevRoot is where this process sees the host's /dev; it is only read
	// (is rdma_cm there?). Responses always name the host's /dev paths.
	DevRoot string
	// CDIDir is where CDI specs are written; "" disables CDI.
	CDIDir string
	// AllocDir is the host directory of gpuAligned pools (pool files and
	// allocation directories, docs/gpu-aligned.md). The daemon must see it
	// at the same path as the host: Allocate's mounts name it. "" refuses
	// gpuAligned pools.
	AllocDir string
	// Allocations lists the kubelet's allocations, for removing allocation
	// directories no container holds; nil: they are never removed.
	Allocations AllocationLister
	// AllocGCInterval and AllocGCGrace: how often allocation directories
	// are swept, and how young one is kept anyway; 0 means the defaults.
	AllocGCInterval, AllocGCGrace time.Duration
	// MetricsAddr is the HTTP address of /metrics and /state; "" disables it.
	MetricsAddr string
	NodeName    string
	// HealthInterval is the sysfs re-read period; 0 means DefaultHealthInterval.
	HealthInterval time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// NetnsMode defaults to NetlinkNetnsMode.
	NetnsMode NetnsModeReader
	// DRA is the DRA front end that serves the pools whose frontend is dra
	// (pkg/dra.Driver); nil refuses such pools.
	DRA DRAFrontend
	// Events trigger an immediate re-read; nil means link and address
	// updates in the daemon's network namespace (nodewatch.Netlink). Use an
	// empty, non-nil slice for none. Changes of class/infiniband are always
	// watched.
	Events []EventSource
}

// DRAFrontend serves the pools whose frontend is dra. Publish is called on
// the Run goroutine with every snapshot the daemon handles (hot-plug, port
// state, GID and netdev changes, config reloads): the members of every
// served dra pool (configured pool name -> devices; a pool with none is
// there, empty) and the node's health. It replaces what was published.
type DRAFrontend interface {
	Publish(pools map[string][]discovery.RDMADevice, noNCCL map[string]bool, healthy map[string]bool) error
}

// nodeSource is what the daemon needs from the node watcher.
type nodeSource interface {
	Latest() (*nodewatch.Snapshot, <-chan struct{})
}

// Daemon is one running device plugin.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	scanner discovery.Scanner
	cdi     *cdiWriter
	status  *statusServer
	watcher *nodewatch.Watcher
	ready   chan struct{}
	// registered is closed once every pool of the first config has
	// registered with the kubelet.
	registered chan struct{}

	// Owned by the Run goroutine.
	conf     config.Config
	confData []byte
	node     nodeSource
	devGen   uint64 // DevicesGen of the last snapshot handed to the pools
	pools    map[string]*poolServer
	// draPools are the members of the served dra pools.
	draPools map[string][]discovery.RDMADevice
	// draNoNCCL are the served dra pools with nccl: false.
	draNoNCCL map[string]bool
	numa      int

	snap *nodewatch.Snapshot // the last one handed to the pools

	nodeStateReport func() any // set before Run
	nriReport       func() any // set before Run

	stateMu     sync.Mutex
	state       State
	view        View
	viewChanged chan struct{}
}

// New checks the configuration, loads the pools file and opens the metrics
// listener; Run does the rest.
func New(cfg Config) (*Daemon, error) {
	if cfg.KubeletDir == "" || cfg.SysRoot == "" {
		return nil, errors.New("device plugin: kubelet dir and sysfs root are required")
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/dev"
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
	if cfg.NetnsMode == nil {
		cfg.NetnsMode = NetlinkNetnsMode{}
	}
	if cfg.Events == nil {
		cfg.Events = []EventSource{nodewatch.Netlink{}}
	}
	d := &Daemon{
		cfg: cfg, log: cfg.Logger, ready: make(chan struct{}), registered: make(chan struct{}), pools: map[string]*poolServer{}, viewChanged: make(chan struct{}),
		scanner: discovery.Scanner{SysRoot: cfg.SysRoot, ProcRoot: cfg.ProcRoot},
	}
	counters := &portCounters{sysRoot: cfg.SysRoot}
	d.m = newMetrics(counters)
	if cfg.CDIDir != "" {
		d.cdi = &cdiWriter{dir: cfg.CDIDir, devRoot: cfg.DevRoot}
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
		d.status = &statusServer{listener: l, m: d.m, state: d.State, ready: d.ready}
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
func (d *Daemon) MetricsAddr() string {
	if d.status == nil {
		return ""
	}
	return d.status.listener.Addr().String()
}

// Ready is closed once the first scan is done and every pool is served.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Registered is closed once the daemon is ready and every pool of its first
// config has registered with the kubelet (a pool closed before that counts
// too): the pod's readiness in a DaemonSet update with surge
// (docs/device-plugin.md, "Updates").
func (d *Daemon) Registered() <-chan struct{} { return d.registered }

// Config returns the configuration the daemon runs with, defaults filled in.
func (d *Daemon) Config() Config { return d.cfg }

// Run is New then Daemon.Run.
func Run(ctx context.Context, cfg Config) error {
	d, err := New(cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Run serves until ctx ends, then stops every pool, removing its socket and
// its CDI spec.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.status != nil {
		d.status.start()
		defer d.status.close()
	}
	defer d.stopAll()
	if err := os.MkdirAll(d.cfg.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("create kubelet device plugin dir: %w", err)
	}
	d.readNetnsMode()
	d.numa = d.scanner.NUMANodes()
	if err := d.watcher.Scan(); err != nil {
		return err
	}
	kubelet, err := newKubeletWatcher(d.cfg.KubeletDir, d.log)
	if err != nil {
		return err
	}
	defer kubelet.close()
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

	snap, changed := d.node.Latest()
	d.applyConfig(ctx, d.conf, snap)
	d.log.Info("device plugin started", "node", d.cfg.NodeName, "pools", len(d.conf.Pools),
		"rdmaDevices", len(snap.Node.RDMADevices), "rdmaNetnsMode", d.stateNetns(), "healthInterval", d.cfg.HealthInterval)
	if d.cfg.Allocations != nil && d.cfg.AllocDir != "" {
		sw := allocSweeper{root: d.cfg.AllocDir, lister: d.cfg.Allocations, interval: d.cfg.AllocGCInterval,
			grace: d.cfg.AllocGCGrace, log: d.log, view: func() View { v, _ := d.View(); return v }}
		swept := make(chan struct{})
		go func() { defer close(swept); sw.run(ctx) }()
		defer func() { cancel(); <-swept }()
	}
	closeWhenRegistered(d.pools, d.registered)
	close(d.ready)
	// The first scan's garbage (every sysfs string read, a thousand
	// devices' worth on a big node) would otherwise stay in RSS until the
	// background scavenger returns it, minutes later.
	debug.FreeOSMemory()
	for {
		select {
		case <-ctx.Done():
			d.log.Info("device plugin stopping")
			return nil
		case <-changed:
			snap, changed = d.node.Latest()
			d.push(snap)
		case ev := <-kubelet.events:
			d.kick(ev)
		case <-confEvents:
			d.reload(ctx)
		}
	}
}

func (d *Daemon) readNetnsMode() {
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

func (d *Daemon) stateNetns() rdma.NetnsMode {
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	return d.state.RDMANetnsMode
}

// stopAll stops every pool server; a normal exit removes the CDI specs.
func (d *Daemon) stopAll() {
	for _, name := range sortedKeys(d.pools) {
		d.pools[name].close(true)
		delete(d.pools, name)
	}
}
