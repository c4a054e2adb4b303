// Package deviceplugin is the kubelet device plugin daemon: it advertises
// RDMA devices as extended resources, one socket and one resource per
// configured pool (pkg/deviceplugin/config), with health from the real port
// state and presence, NUMA topology, PCIe-aware preferred allocation
// (pkg/allocator), Allocate responses with device nodes, NCCL environment and
// optional CDI devices, config reload, and Prometheus metrics.
//
// It reads the node through discovery.Scanner under roots given in Config,
// so it runs unprivileged on fixture trees; it never chooses devices itself
// (pkg/allocator does) and keeps no package-level state.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// DefaultHealthInterval is how often port states and presence are re-read:
// half the 1 s the kubelet should wait at most to learn of a change.
const DefaultHealthInterval = 500 * time.Millisecond

// maxRescans bounds the full scans spent on a device that is listed in
// class/infiniband but cannot be read.
const maxRescans = 10

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
	// MetricsAddr is the HTTP address of /metrics and /state; "" disables it.
	MetricsAddr string
	NodeName    string
	// HealthInterval is the sysfs re-read period; 0 means DefaultHealthInterval.
	HealthInterval time.Duration
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
	// NetnsMode defaults to NetlinkNetnsMode.
	NetnsMode NetnsModeReader
	// Events trigger an immediate re-read; nil means NetlinkLinks. Use an
	// empty, non-nil slice for none.
	Events []EventSource
}

// Daemon is one running device plugin.
type Daemon struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics
	counters *portCounters
	scanner  discovery.Scanner
	cdi      *cdiWriter
	listener net.Listener
	numa     int

	// Owned by the Run goroutine.
	conf     config.Config
	confData []byte
	node     *discovery.Node
	present  map[string]bool // class/infiniband names the last full scan accounted for
	hr       healthReader
	ports    map[string][]int
	health   map[string]bool
	assigned map[string][]discovery.RDMADevice
	pools    map[string]*poolServer
	retry    map[string]time.Duration
	regDone  chan regResult
	retryC   chan string
	unread   map[string]int // device -> full scans that could not read it
	// failedReads counts rescans for failed state reads since the last
	// change of names.
	failedReads int
	regKey      map[string]string

	stateMu sync.Mutex
	state   State
	ready   chan struct{}
}

type regResult struct {
	p   *poolServer
	err error
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
	if cfg.NetnsMode == nil {
		cfg.NetnsMode = NetlinkNetnsMode{}
	}
	if cfg.Events == nil {
		cfg.Events = []EventSource{NetlinkLinks{}}
	}
	d := &Daemon{
		cfg: cfg, log: cfg.Logger, hr: healthReader{sysRoot: cfg.SysRoot},
		counters: newPortCounters(cfg.SysRoot),
		scanner:  discovery.Scanner{SysRoot: cfg.SysRoot, ProcRoot: cfg.ProcRoot},
		pools:    map[string]*poolServer{}, retry: map[string]time.Duration{},
		regDone: make(chan regResult, 16), retryC: make(chan string, 16),
		present: map[string]bool{}, unread: map[string]int{}, regKey: map[string]string{}, health: map[string]bool{}, ready: make(chan struct{}),
	}
	d.m = newMetrics(d.counters)
	if cfg.CDIDir != "" {
		d.cdi = &cdiWriter{dir: cfg.CDIDir, devRoot: cfg.DevRoot}
	}
	d.conf = config.Default()
	if cfg.ConfigFile != "" {
		data, err := os.ReadFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("read device plugin config: %w", err)
		}
		if d.conf, err = config.Parse(data); err != nil {
			return nil, fmt.Errorf("load %s: %w", cfg.ConfigFile, err)
		}
		d.confData = data
	}
	d.m.reload(true)
	if cfg.MetricsAddr != "" {
		l, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			return nil, fmt.Errorf("listen for metrics: %w", err)
		}
		d.listener = l
	}
	return d, nil
}

// MetricsAddr is the metrics listener's address ("" when disabled).
func (d *Daemon) MetricsAddr() string {
	if d.listener == nil {
		return ""
	}
	return d.listener.Addr().String()
}

// Ready is closed once the first scan is done and every pool is served.
func (d *Daemon) Ready() <-chan struct{} { return d.ready }

// Run is New then Daemon.Run.
func Run(ctx context.Context, cfg Config) error {
	d, err := New(cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}

// Run serves until ctx ends, then stops every pool and removes its socket.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.listener != nil {
		srv := &http.Server{Handler: d.httpHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(d.listener) }()
		defer srv.Close()
	}
	defer d.stopAll()
	defer d.hr.close()
	if err := os.MkdirAll(d.cfg.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("create kubelet device plugin dir: %w", err)
	}
	d.readNetnsMode()
	d.numa = d.scanner.NUMANodes()
	if err := d.rescan(); err != nil {
		return err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch kubelet dir: %w", err)
	}
	defer w.Close()
	if err := w.Add(d.cfg.KubeletDir); err != nil {
		return fmt.Errorf("watch kubelet dir: %w", err)
	}
	if d.cfg.ConfigFile != "" {
		if err := w.Add(filepath.Dir(d.cfg.ConfigFile)); err != nil {
			return fmt.Errorf("watch config dir: %w", err)
		}
	}
	// On sysfs inotify sees nothing; on fixtures and some container views
	// it makes removals immediate. The ticker is what the design relies on.
	_ = w.Add(filepath.Join(d.cfg.SysRoot, "class/infiniband"))
	d.applyConfig(ctx, d.conf)
	d.log.Info("device plugin started", "node", d.cfg.NodeName, "pools", len(d.conf.Pools),
		"rdmaDevices", len(d.node.RDMADevices), "rdmaNetnsMode", d.stateNetns(), "healthInterval", d.cfg.HealthInterval)
	close(d.ready)

	pokes := make(chan struct{}, 1)
	poke := func() {
		select {
		case pokes <- struct{}{}:
		default:
		}
	}
	for _, src := range d.cfg.Events {
		go func() {
			if err := src.Run(ctx, poke); err != nil && ctx.Err() == nil {
				d.log.Warn("event source stopped; relying on the sysfs re-read", "err", err)
			}
		}()
	}
	tick := time.NewTicker(d.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			d.log.Info("device plugin stopping")
			return nil
		case <-tick.C:
			d.refresh()
		case <-pokes:
			d.refresh()
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			d.handleEvent(ctx, ev)
		case err := <-w.Errors:
			d.log.Warn("file watcher", "err", err)
		case r := <-d.regDone:
			d.registered(r)
		case name := <-d.retryC:
			if p, ok := d.pools[name]; ok {
				d.register(ctx, p)
			}
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

func (d *Daemon) stopAll() {
	for name, p := range d.pools {
		p.stop()
		delete(d.pools, name)
	}
}
