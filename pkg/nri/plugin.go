package nri

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
)

const (
	// DefaultSocket is where containerd and CRI-O listen for NRI plugins.
	DefaultSocket = "/var/run/nri/nri.sock"
	// PluginName and PluginIndex identify the plugin to the runtime, which
	// calls plugins in index order ("00" first); a low index runs before
	// plugins that may read the limit.
	PluginName  = "kube-rdma-memlock"
	PluginIndex = "10"
	// DefaultBackoff and DefaultMaxBackoff bound the wait between two
	// connection attempts; it doubles after each failure.
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 10 * time.Second
)

// Source is the agent's view of its pools (agent.Agent); the plugin imports no front end.
type Source interface {
	View() (agent.View, <-chan struct{})
}

// Config is what the plugin needs.
type Config struct {
	// Socket is the runtime's NRI socket; "" is DefaultSocket.
	Socket string
	Source Source
	// DevRoot is where the daemon sees the host's /dev, to read the major
	// and minor of its device nodes; "" matches by path alone.
	DevRoot string
	Logger  *slog.Logger
	// FailClosed refuses CreateContainer of a container that holds devices
	// of a pool whose pods get netdevs (ChainedPool, gpuAligned pools) when
	// Records has no complete attachment of its pod sandbox
	// (--nri-fail-closed).
	FailClosed bool
	// ChainedPool is the chained CNI entry's pool (--cni-chained-pool).
	ChainedPool string
	// SharedNetdev: the chained entry gives pods of shared pools child
	// netdevs (--cni-shared-netdev macvlan or ipvlan); without it they get
	// none and are not refused for it (netdevcheck.Chain).
	SharedNetdev bool
	// Records are the CNI plugin's attachment records; nil with FailClosed
	// refuses every container holding devices of a netdev pool.
	Records RecordLister
	// Claims are the DRA front end's claim records; nil when the daemon
	// runs no DRA front end. With it, a ChainedPool that is not one of the
	// view's is the DRA front end's (netdevcheck.WithDRA), and FailClosed
	// refuses a container of a claim of it whose sandbox has no complete
	// attachment of the claim's devices.
	Claims ClaimLister
	// Backoff and MaxBackoff: 0 means the defaults.
	Backoff, MaxBackoff time.Duration
}

// Report is the plugin's part of /state ("nri").
type Report struct {
	// Enabled: the daemon runs the plugin (--nri).
	Enabled bool `json:"enabled"`
	// Connected: registered with the runtime now.
	Connected bool   `json:"connected"`
	Socket    string `json:"socket,omitempty"`
	// Reason says why the plugin is not connected.
	Reason string `json:"reason,omitempty"`
	// Attempts counts connection attempts, Connections successful
	// registrations, since the daemon started.
	Attempts    int `json:"attempts"`
	Connections int `json:"connections"`
	// Adjusted counts containers given a memlock limit.
	Adjusted int64 `json:"adjusted"`
	// FailClosed: containers whose pod has no netdevs of its devices are
	// refused (--nri-fail-closed); Refused counts them.
	FailClosed bool  `json:"failClosed"`
	Refused    int64 `json:"refused"`
}

// Plugin is the NRI plugin and its connection loop.
type Plugin struct {
	cfg Config
	log *slog.Logger

	connected prometheus.Gauge
	decisions *prometheus.CounterVec

	mu     sync.Mutex // report and warned; Report is called under the daemon's state lock
	report Report
	warned map[string]bool // pod sandbox IDs whose annotation problem was logged

	// devMu guards the device view cache. It is not mu: building the view
	// takes the daemon's state lock, which the daemon holds while it calls
	// Report.
	devMu   sync.Mutex
	devs    Devices
	devsFor <-chan struct{} // the view change that invalidates devs
}

// maxWarned bounds the pods remembered for logging once: RemovePodSandbox
// events missed while disconnected would otherwise leave entries forever.
const maxWarned = 10000

// New returns a plugin that is not connected yet; Run connects.
func New(cfg Config) *Plugin {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff < cfg.Backoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.Backoff)
	}
	return &Plugin{
		cfg: cfg, log: cfg.Logger.With("component", "nri"), warned: map[string]bool{},
		report: Report{Enabled: true, Socket: cfg.Socket, Reason: "not connected yet", FailClosed: cfg.FailClosed},
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kube_rdma_nri_connected",
			Help: "1 while the NRI plugin is registered with the container runtime, 0 otherwise."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kube_rdma_nri_containers_total",
			Help: "Containers seen at creation by the NRI plugin, by decision (adjusted: RLIMIT_MEMLOCK set; untouched: none of our devices; refused: its pod has no netdevs of its devices, --nri-fail-closed)."},
			[]string{"decision"}),
	}
}

// Describe and Collect make the plugin a prometheus.Collector of its series.
func (p *Plugin) Describe(ch chan<- *prometheus.Desc) {
	p.connected.Describe(ch)
	p.decisions.Describe(ch)
}

// Collect implements prometheus.Collector.
func (p *Plugin) Collect(ch chan<- prometheus.Metric) {
	p.connected.Collect(ch)
	p.decisions.Collect(ch)
}

// Report returns the plugin's state for /state.
func (p *Plugin) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.report
}

// DisabledReport is /state's "nri" when the daemon runs without --nri.
func DisabledReport() Report { return Report{Reason: "--nri not given"} }

// Run waits until no other instance of the plugin is registered with the
// runtime (handover.go), then connects to the runtime and serves it until
// ctx ends, reconnecting
// with backoff whenever the socket is missing, refuses the connection or the
// runtime goes away (a runtime restart). Being unable to connect is not an
// error: it is logged once per outage and reported on /state and /metrics.
func (p *Plugin) Run(ctx context.Context) error {
	release, err := p.waitTurn(ctx)
	if err != nil {
		p.setDown("daemon stopping")
		return nil
	}
	defer release()
	wait := p.cfg.Backoff
	down := false // an outage was logged
	for ctx.Err() == nil {
		err := p.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errServed) {
			wait = p.cfg.Backoff
			// One message per outage: the failures until the runtime is
			// back are debug.
			p.log.Warn("NRI connection lost; new containers get no memlock limit until it is back; retrying", "socket", p.cfg.Socket)
			down = true
		} else {
			reason := explain(p.cfg.Socket, err)
			p.setDown(reason)
			if !down {
				p.log.Warn("NRI not available: containers get no memlock limit; devices are still served; retrying", "socket", p.cfg.Socket, "reason", reason)
				down = true
			} else {
				p.log.Debug("NRI connection attempt failed", "reason", reason, "retryIn", wait)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, p.cfg.MaxBackoff)
	}
	p.setDown("daemon stopping")
	return nil
}

func (p *Plugin) setUp() {
	p.mu.Lock()
	p.report.Connected, p.report.Reason = true, ""
	p.report.Connections++
	p.mu.Unlock()
	p.connected.Set(1)
}

func (p *Plugin) setDown(reason string) {
	p.mu.Lock()
	p.report.Connected, p.report.Reason = false, reason
	p.mu.Unlock()
	p.connected.Set(0)
}

// explain turns a connection error into the /state reason.
func explain(socket string, err error) string {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Sprintf("NRI socket %s does not exist: NRI is not enabled in the container runtime (containerd: [plugins.\"io.containerd.nri.v1.nri\"] disable = false)", socket)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("connection refused on NRI socket %s: the runtime is not listening (restarting, or NRI disabled)", socket)
	}
	return err.Error()
}

// devices returns the decision's device view, rebuilt when the daemon's
// view changed.
func (p *Plugin) devices() Devices {
	p.devMu.Lock()
	defer p.devMu.Unlock()
	if p.devsFor != nil {
		select {
		case <-p.devsFor:
		default:
			return p.devs
		}
	}
	v, changed := p.cfg.Source.View()
	p.devs, p.devsFor = FromView(v, p.cfg.DevRoot), changed
	chain := netdevcheck.Chain{Pool: p.cfg.ChainedPool, SharedNetdev: p.cfg.SharedNetdev}
	p.devs.Netdev = netdevcheck.WithDRA(netdevcheck.Pools(v.Pools, chain), v.Pools, chain, p.cfg.Claims != nil)
	return p.devs
}
