// Package deviceplugin is the kubelet device plugin front end of the node
// agent (pkg/agent): it advertises RDMA devices as extended resources, one
// socket and one resource per pool whose frontend is devicePlugin, with
// health from the real port state and presence, NUMA topology, PCIe-aware
// preferred allocation (pkg/allocator), Allocate responses with device
// nodes, NCCL environment and optional CDI devices, the host directory
// of gpuAligned pools (pkg/hostapi/allocdir) and the NPWG device-info files
// of allocated devices (pkg/hostapi/devinfo, devinfo.go).
//
// Plugin implements agent.FrontEnd: the agent hands it its pools, their
// members and the node's health; one poolServer per pool serves its socket
// and owns its registration with the kubelet; a kubeletWatcher tells pool
// servers when the kubelet restarted.
//
// It reads no sysfs (the agent hands it snapshots' devices), never chooses
// devices itself (pkg/allocator does) and keeps no package-level state. It
// imports the agent, never another front end.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

// Config is what the device plugin front end needs; cmd/device-plugin fills
// it from flags.
type Config struct {
	// KubeletDir is the kubelet's device plugin directory.
	KubeletDir string
	// DevRoot is where this process sees the host's /dev; it is only read
	// (is rdma_cm there?). Responses always name the host's /dev paths.
	DevRoot string
	// CDIDir is where CDI specs are written; "" disables CDI.
	CDIDir string
	// MemlockHook is the host path of the kube-rdma binary that each pool's
	// CDI spec runs as a createRuntime hook to raise the container's
	// RLIMIT_MEMLOCK to the pool's memlock (pkg/memlockhook); "" names no
	// hook. Only with CDIDir.
	MemlockHook string
	// FailClosed, with MemlockHook, puts on each CDI device of the pool
	// whose pods get netdevs from the chained CNI entry the same binary's
	// netdev hook (pkg/memlockhook, NetdevCommand): the runtime refuses a
	// container of a pod whose sandbox got none of them, whether or not the
	// NRI plugin is connected. nil puts none.
	FailClosed *FailClosed
	// AllocDir is the host directory of gpuAligned pools (pool files and
	// allocation directories, docs/gpu-aligned.md). The daemon must see it
	// at the same path as the host: Allocate's mounts name it. The agent
	// refuses gpuAligned pools when it is "" (agent.Config.AllocDir).
	AllocDir string
	// DeviceInfoDir is where the NPWG device-info files of allocated
	// devices are written (pkg/hostapi/devinfo, devinfo.DefaultDPDir on the host);
	// "" writes none.
	DeviceInfoDir string
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// Plugin is the device plugin front end (agent.FrontEnd): the pool
// servers of the pools whose frontend is devicePlugin.
type Plugin struct {
	cfg   Config
	log   *slog.Logger
	m     *metrics
	cdi   *cdiWriter
	alloc allocContext

	// Set by Start; owned by the agent's Run goroutine.
	ctx     context.Context // the pool servers' loops end with the agent's Run
	numa    int
	kubelet *kubeletWatcher
	kicked  chan struct{} // closed when the kubelet events' forwarder returns
	last    []agent.Assignment

	mu    sync.Mutex // pools: the Run goroutine writes, the kubelet events' forwarder reads
	pools map[string]*poolServer

	// registered is closed once every pool of the first Update has
	// registered with the kubelet (or closed first).
	registered     chan struct{}
	registeredOnce sync.Once
}

// Registered is closed once every pool of the first Update (the agent's
// first config) has registered with the kubelet (a pool closed before that
// counts too): with the agent's Ready, the pod's readiness in a DaemonSet
// update with surge (docs/device-plugin.md, "Updates").
func (p *Plugin) Registered() <-chan struct{} { return p.registered }

var (
	_ agent.FrontEnd   = (*Plugin)(nil)
	_ agent.FileKeeper = (*Plugin)(nil)
)

// New checks the configuration; Start (called by the agent's Run) does the
// rest.
func New(cfg Config) (*Plugin, error) {
	if cfg.KubeletDir == "" {
		return nil, errors.New("device plugin: kubelet dir is required")
	}
	if cfg.DevRoot == "" {
		cfg.DevRoot = "/dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Plugin{cfg: cfg, log: cfg.Logger, m: newMetrics(), pools: map[string]*poolServer{}, registered: make(chan struct{}),
		alloc: allocContext{devRoot: cfg.DevRoot, cdi: cfg.CDIDir != "", allocDir: cfg.AllocDir, devInfoDir: cfg.DeviceInfoDir}}
	if cfg.CDIDir != "" {
		p.cdi = &cdiWriter{dir: cfg.CDIDir, devRoot: cfg.DevRoot, hook: cfg.MemlockHook, failClosed: cfg.FailClosed}
	}
	return p, nil
}

// Start creates the kubelet's device plugin directory and watches it for
// kubelet restarts until ctx ends or Stop.
func (p *Plugin) Start(ctx context.Context, node agent.Node) error {
	if err := os.MkdirAll(p.cfg.KubeletDir, 0o750); err != nil {
		return fmt.Errorf("create kubelet device plugin dir: %w", err)
	}
	kubelet, err := newKubeletWatcher(p.cfg.KubeletDir, p.log)
	if err != nil {
		return err
	}
	p.ctx, p.numa, p.kubelet, p.kicked = ctx, node.NUMANodes, kubelet, make(chan struct{})
	go func() {
		defer close(p.kicked)
		for {
			select {
			case <-ctx.Done():
				return
			case <-kubelet.done:
				return
			case ev := <-kubelet.events:
				p.kick(ev)
			}
		}
	}()
	return nil
}

// Update starts, keeps or replaces pool servers when the pools changed,
// then hands every pool its members (when they changed) and health. A pool
// whose definition and resource name are unchanged keeps running; a changed
// one is closed (its streams end, its socket goes) and a new server serves
// and registers it.
func (p *Plugin) Update(u agent.Update) error {
	if p.ctx == nil {
		return errors.New("device plugin: update before start")
	}
	var started []*poolServer
	if u.MembersChanged && !samePools(p.last, u.Pools) {
		started = p.reconfigure(u.Pools)
	}
	p.last = u.Pools
	byName := map[string]agent.Assignment{}
	for _, a := range u.Pools {
		byName[a.Pool.Name] = a
	}
	for _, name := range sortedKeys(p.pools) {
		s := p.pools[name]
		if u.MembersChanged || slices.Contains(started, s) {
			s.setMembers(byName[name].Members)
		}
		s.setHealth(u.Healthy)
	}
	for _, s := range started {
		s.start(p.ctx)
	}
	p.registeredOnce.Do(func() { closeWhenRegistered(p.pools, p.registered) })
	return nil
}

// reconfigure closes the pool servers of pools that are gone or changed
// and creates (not starts) those of new ones.
func (p *Plugin) reconfigure(pools []agent.Assignment) (started []*poolServer) {
	want := map[string]agent.Assignment{}
	for _, a := range pools {
		want[a.Pool.Name] = a
	}
	for _, name := range sortedKeys(p.pools) {
		s := p.pools[name]
		np, ok := want[name]
		if ok && np.Refused == "" && reflect.DeepEqual(np.Pool, s.pool) && np.Resource == s.resource {
			continue
		}
		p.log.Info("stopping pool", "pool", name, "replaced", ok)
		s.close(!ok) // a replaced pool's spec is rewritten by its successor
		p.mu.Lock()
		delete(p.pools, name)
		p.mu.Unlock()
		if s.pool.GPUAligned() && (!ok || !np.Pool.GPUAligned() || np.Refused != "") {
			if err := removePoolFile(p.cfg.AllocDir, name); err != nil {
				p.log.Warn("pool no longer gpuAligned", "pool", name, "err", err)
			}
		}
	}
	for _, a := range pools {
		if _, ok := p.pools[a.Pool.Name]; ok {
			continue
		}
		if a.Refused != "" {
			// Reported by the agent. A pool file of an earlier run (the
			// node was in exclusive mode then) would have the CNI bind its
			// NICs.
			if err := removePoolFile(p.cfg.AllocDir, a.Pool.Name); err != nil {
				p.log.Warn("refused pool", "pool", a.Pool.Name, "err", err)
			}
			continue
		}
		s := newPoolServer(a.Pool, a.Resource, p.cfg.KubeletDir, p.numa, p.alloc, p.cdi, p.log, p.m)
		p.mu.Lock()
		p.pools[a.Pool.Name] = s
		p.mu.Unlock()
		started = append(started, s)
	}
	return started
}

// samePools reports whether two Updates name the same pools with the same
// definitions, resource names and refusals (members aside).
func samePools(a, b []agent.Assignment) bool {
	return slices.EqualFunc(a, b, func(x, y agent.Assignment) bool {
		return x.Resource == y.Resource && x.Refused == y.Refused && reflect.DeepEqual(x.Pool, y.Pool)
	})
}

// Status is what every pool advertises to the kubelet, in pool name order.
// RestoreFiles implements agent.FileKeeper: a gpuAligned pool's pool.json
// that is gone (the CNI plugin moved a torn one aside) is written again, and
// a pool's CDI spec that is gone or names other devices than its members.
func (p *Plugin) RestoreFiles() {
	for _, name := range sortedKeys(p.pools) {
		p.pools[name].restorePoolFile()
		p.pools[name].restoreSpec()
	}
}

func (p *Plugin) Status() []agent.PoolStatus {
	var out []agent.PoolStatus
	for _, name := range sortedKeys(p.pools) {
		s := p.pools[name]
		snap, _ := s.current()
		st := agent.PoolStatus{Name: name, Devices: make([]agent.DeviceStatus, 0, len(snap.devices))}
		for _, dev := range snap.devices {
			ds := agent.DeviceStatus{ID: dev.ID, Healthy: dev.Health == healthString(true), RDMADevices: []string{}}
			for _, r := range snap.byID[dev.ID] {
				ds.RDMADevices = append(ds.RDMADevices, r.Name)
			}
			for _, n := range dev.GetTopology().GetNodes() {
				ds.NUMANodes = append(ds.NUMANodes, n.ID)
			}
			st.Devices = append(st.Devices, ds)
			if p.cdi != nil && !s.pool.GPUAligned() && s.pool.Mode == config.Exclusive {
				st.CDIDevices = append(st.CDIDevices, cdiName(s.resource, dev.ID))
			}
		}
		if p.cdi != nil && (s.pool.Mode == config.Shared || s.pool.GPUAligned()) && len(s.devices()) > 0 {
			st.CDIDevices = []string{cdiName(s.resource, cdiSharedDevice)}
		}
		out = append(out, st)
	}
	return out
}

// Stop stops watching the kubelet and stops every pool server; a normal
// exit removes the CDI specs.
func (p *Plugin) Stop() {
	if p.kubelet != nil {
		p.kubelet.close()
		<-p.kicked
		p.kubelet = nil
	}
	for _, name := range sortedKeys(p.pools) {
		p.pools[name].close(true)
		p.mu.Lock()
		delete(p.pools, name)
		p.mu.Unlock()
	}
	// The hook binary goes with the last spec that names it; specs another
	// daemon serves now keep theirs.
	if p.cfg.MemlockHook != "" && p.cfg.CDIDir != "" {
		if err := memlockhook.RemoveUnused(filepath.Dir(p.cfg.MemlockHook), p.cfg.CDIDir); err != nil {
			p.log.Warn("remove the memlock hook binary", "err", err)
		}
	}
}

// kick forwards a kubelet event to the pool servers it concerns.
func (p *Plugin) kick(ev kubeletEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range sortedKeys(p.pools) {
		if ev.all || ev.socket == SocketName(name) {
			p.pools[name].kick()
		}
	}
}

// Describe implements prometheus.Collector: the agent serves the front
// end's series on its /metrics.
func (p *Plugin) Describe(ch chan<- *prometheus.Desc) {
	p.m.allocations.Describe(ch)
	p.m.registrations.Describe(ch)
}

// Collect implements prometheus.Collector.
func (p *Plugin) Collect(ch chan<- prometheus.Metric) {
	p.m.allocations.Collect(ch)
	p.m.registrations.Collect(ch)
}

// metrics are the pool servers' series.
type metrics struct {
	allocations   *prometheus.CounterVec
	registrations *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: agent.MetricsNamespace, Name: "allocations_total",
			Help: "Allocate container requests per pool, by result."}, []string{"pool", "result"}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: agent.MetricsNamespace, Name: "registrations_total",
			Help: "Registrations with the kubelet per pool, by result."}, []string{"pool", "result"}),
	}
}

func result(ok bool) string {
	if ok {
		return "success"
	}
	return "failure"
}

// A nil *metrics records nothing, so pool servers work without one.
func (m *metrics) allocation(pool string, ok bool) {
	if m != nil {
		m.allocations.WithLabelValues(pool, result(ok)).Inc()
	}
}

func (m *metrics) registration(pool string, ok bool) {
	if m != nil {
		m.registrations.WithLabelValues(pool, result(ok)).Inc()
	}
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
