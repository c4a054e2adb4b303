package nodestate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// Defaults of Config.
const (
	DefaultInterval   = 2 * time.Second
	DefaultPodPoll    = 10 * time.Second
	DefaultMaxBackoff = 30 * time.Second
	// DefaultRefresh is the kubelet's nodeStatusReportFrequency: a node
	// whose status does not change still reports it this often, so that its
	// age says whether the one who writes it is alive.
	DefaultRefresh = 5 * time.Minute
	callTimeout    = 10 * time.Second
)

// Source is the agent's view of what it serves (agent.Agent); the publisher imports no front end.
type Source interface {
	View() (agent.View, <-chan struct{})
}

// PodLister lists the kubelet's allocations (a podresources.Client).
type PodLister interface {
	List(ctx context.Context) ([]podresources.ContainerDevices, error)
}

// RecordLister lists the CNI plugin's attachment records
// (attachment.Store.Records).
type RecordLister interface {
	Records() ([]attachment.Attachment, error)
}

// ClaimLister lists the DRA front end's claim records (claimrecord.ReadAll
// behind the daemon's lister, which moves a record that does not decode
// aside and logs it, and lists none before the directory exists).
type ClaimLister interface {
	Claims() ([]claimrecord.Record, error)
}

// MissingNetdevs are the pods the daemon found without the netdevs of
// their devices (netdevwatch.Detector).
type MissingNetdevs interface {
	PodsWithoutNetdevs() []v1alpha1.PodWithoutNetdevs
}

// GiveUps are the NICs the CNI plugin gave up on lately, newest first
// (cnimetrics.Collector).
type GiveUps interface {
	GiveUps(now time.Time) []cniops.GiveUp
}

// Writer writes the status of node's object, creating it when needed
// (Client).
type Writer interface {
	Apply(ctx context.Context, node string, st *v1alpha1.RDMANodeStateStatus) error
}

// Config is what a Publisher needs.
type Config struct {
	NodeName string
	Source   Source
	// Pods may be nil: no allocations are published.
	Pods PodLister
	// Records may be nil: allocations then name no pod-side devices
	// (AttachedDevice). Listed with Pods.
	Records RecordLister
	// Missing may be nil: status.podsWithoutNetdevs stays empty. Read at
	// each write; a change shows at the next poll of the kubelet's
	// allocations.
	Missing MissingNetdevs
	// Claims may be nil (no --dra): status.claims stays empty. Listed with
	// Pods; on an error (a record of a newer version: an upgrade done
	// halfway) the last good list stays and Report says why.
	Claims ClaimLister
	// GiveUps may be nil (no --cni-metrics-dir): status.givenUp stays
	// empty. Read at each write, like Missing.
	GiveUps GiveUps
	Writer  Writer
	// CNIMode goes into status.cni.mode ("" leaves status.cni out).
	CNIMode string
	// CNIChainedPool goes into status.cni.chainedPool.
	CNIChainedPool string
	// DaemonVersion goes into status.daemonVersion.
	DaemonVersion string
	// Interval is the least time between two writes (DefaultInterval).
	Interval time.Duration
	// PodPoll is how often the kubelet's allocations are listed (DefaultPodPoll).
	PodPoll time.Duration
	// MaxBackoff bounds the wait before retrying a failed write
	// (DefaultMaxBackoff); the first retry waits Interval.
	MaxBackoff time.Duration
	// Refresh is the longest the status goes unwritten: once the last write
	// is this old, the same content is written again with a new lastUpdate
	// (DefaultRefresh; checked at each poll of the kubelet's allocations, and
	// not while that poll fails).
	// Without it a quiet node's lastUpdate ages without bound and says
	// nothing: `kubectl rdma doctor` warns past --stale-after (10 min), and
	// a daemon that is gone looks the same as one with nothing to say.
	// Negative: never.
	Refresh time.Duration
	Logger  *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Report is the publisher's health, served on the daemon's /state.
type Report struct {
	// Enabled is false when the daemon does not publish; Reason says why.
	Enabled bool   `json:"enabled"`
	Reason  string `json:"reason,omitempty"`
	Object  string `json:"object,omitempty"`
	// OK is true once a write succeeded and the last attempt did not fail.
	OK        bool      `json:"ok"`
	Writes    int       `json:"writes"`
	LastWrite time.Time `json:"lastWrite,omitzero"`
	LastError string    `json:"lastError,omitempty"`
	// Failures counts failed writes since the last successful one.
	Failures int `json:"failures,omitempty"`
	// PodResourcesError is the last failure to list the kubelet's
	// allocations (the status keeps the last good list meanwhile).
	PodResourcesError string `json:"podResourcesError,omitempty"`
	// ClaimRecordsError is the last failure to list the DRA claim records
	// (the status keeps the last good list meanwhile).
	ClaimRecordsError string `json:"claimRecordsError,omitempty"`
}

// Publisher keeps node's RDMANodeState current.
type Publisher struct {
	cfg Config
	log *slog.Logger

	// Owned by Run.
	containers []podresources.ContainerDevices
	records    []attachment.Attachment
	claims     []claimrecord.Record
	written    *v1alpha1.RDMANodeStateStatus

	mu     sync.Mutex
	report Report
}

// New fills in Config's defaults.
func New(cfg Config) *Publisher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.PodPoll <= 0 {
		cfg.PodPoll = DefaultPodPoll
	}
	if cfg.MaxBackoff < cfg.Interval {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.Interval)
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Publisher{cfg: cfg, log: cfg.Logger.With("rdmanodestate", cfg.NodeName),
		report: Report{Enabled: true, Object: cfg.NodeName}}
}

// Report returns the publisher's health.
func (p *Publisher) Report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.report
}

// Run publishes until ctx ends. It returns nil then; failures are retried,
// logged and reported, never returned.
func (p *Publisher) Run(ctx context.Context) error {
	_, changed := p.cfg.Source.View()
	p.listPods(ctx)
	pods := time.NewTicker(p.cfg.PodPoll)
	defer pods.Stop()
	wake := time.NewTimer(0) // the first write: at once
	defer wake.Stop()
	dirty, waiting := true, true
	var next time.Time // no write before this
	backoff := p.cfg.Interval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			_, changed = p.cfg.Source.View()
			dirty = true
		case <-pods.C:
			p.listPods(ctx)
			dirty = true
		case <-wake.C:
			waiting = false
		}
		if !dirty || waiting {
			continue
		}
		if now := p.cfg.Now(); now.Before(next) {
			wake.Reset(next.Sub(now))
			waiting = true
			continue
		}
		wrote, err := p.publish(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			p.failed(err, backoff)
			wake.Reset(backoff)
			waiting = true
			backoff = min(2*backoff, p.cfg.MaxBackoff)
			continue
		}
		dirty, backoff = false, p.cfg.Interval
		if wrote {
			next = p.cfg.Now().Add(p.cfg.Interval)
		}
	}
}

// publish builds the status and writes it when its content changed, or when
// the last write is Refresh old.
func (p *Publisher) publish(ctx context.Context) (wrote bool, err error) {
	view, _ := p.cfg.Source.View()
	var missing []v1alpha1.PodWithoutNetdevs
	if p.cfg.Missing != nil {
		missing = p.cfg.Missing.PodsWithoutNetdevs()
	}
	now := p.cfg.Now()
	var gaveUp []cniops.GiveUp
	if p.cfg.GiveUps != nil {
		gaveUp = p.cfg.GiveUps.GiveUps(now)
	}
	st := Build(Input{View: view, Containers: p.containers, Attachments: p.records, CNIMode: p.cfg.CNIMode, CNIChainedPool: p.cfg.CNIChainedPool,
		PodsWithoutNetdevs: missing, Claims: p.claims, GiveUps: gaveUp, DaemonVersion: p.cfg.DaemonVersion, Now: now})
	if sameContent(&st, p.written) && !p.due(st.LastUpdate.Time) {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := p.cfg.Writer.Apply(cctx, p.cfg.NodeName, &st); err != nil {
		return false, err
	}
	p.written = &st
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.report.Failures > 0 {
		p.log.Info("rdmanodestate written again", "after", p.report.Failures)
	}
	p.report.OK, p.report.Writes, p.report.LastWrite = true, p.report.Writes+1, st.LastUpdate.Time
	p.report.LastError, p.report.Failures = "", 0
	return true, nil
}

// due reports whether the status last written is Refresh old at now, and the
// kubelet's allocations were listed at the last poll: a refresh says the
// daemon's view is current, and with the kubelet not answering it is not (the
// status keeps the last good list; its age then shows).
func (p *Publisher) due(now time.Time) bool {
	if p.cfg.Refresh <= 0 || p.written == nil || now.Sub(p.written.LastUpdate.Time) < p.cfg.Refresh {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.report.PodResourcesError == ""
}

func (p *Publisher) failed(err error, retry time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.report.OK, p.report.LastError = false, err.Error()
	p.report.Failures++
	// One warning per outage, then debug: an API server down for an hour
	// must not fill the log.
	if p.report.Failures == 1 {
		p.log.Warn("write rdmanodestate failed; retrying with backoff", "err", err, "retry", retry)
	} else {
		p.log.Debug("write rdmanodestate failed", "err", err, "retry", retry, "failures", p.report.Failures)
	}
}

// listPods refreshes the kubelet's allocations; on failure the last good
// list stays.
func (p *Publisher) listPods(ctx context.Context) {
	if p.cfg.Records != nil {
		// Records only fails to read the directory itself: keep the last
		// good list then, as for the kubelet's.
		if recs, err := p.cfg.Records.Records(); err == nil {
			p.records = recs
		}
	}
	p.listClaims()
	if p.cfg.Pods == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	ctrs, err := p.cfg.Pods.List(cctx)
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		p.containers = ctrs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg != "" && p.report.PodResourcesError == "" {
		p.log.Warn("list pod resources failed; allocations keep the last good list", "err", err)
	}
	p.report.PodResourcesError = msg
}

// listClaims refreshes the DRA claim records; on failure the last good
// list stays, and the first failure of a run of them is a warning.
func (p *Publisher) listClaims() {
	if p.cfg.Claims == nil {
		return
	}
	recs, err := p.cfg.Claims.Claims()
	msg := ""
	if err != nil {
		msg = err.Error()
	} else {
		p.claims = recs
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if msg != "" && p.report.ClaimRecordsError == "" {
		p.log.Warn("list dra claim records failed; status.claims keeps the last good list", "err", err)
	}
	p.report.ClaimRecordsError = msg
}
