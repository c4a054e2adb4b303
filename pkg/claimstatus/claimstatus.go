// Package claimstatus is the daemon's writer of the network status of the
// DRA claims whose netdevs the CNI plugin attaches (the chained pool of
// frontend dra, docs/dra.md "Claim status"): for each device of such a
// claim that a complete attachment record put into a pod the claim is
// reserved for, the claim's status.devices entry (KEP-4817: driver, pool,
// device; networkData with the pod's interface name, its IPs as CIDRs and
// its MAC; a condition Ready True, reason NetdevAttached), applied with
// server-side apply under the field manager FieldManager(node); the entry
// goes (the apply leaves it out) when the attachment does (DEL).
//
// Every Interval it reads the DRA front end's claim records and the CNI
// plugin's attachment records, both local files, and compares what they
// say with what it last saw the API server hold for each claim: it writes
// only a claim whose status differs, so a steady node makes no request at
// all. What the server holds is read once per claim (a GET) when the
// writer does not know it yet (after a start); after a write, it is what
// was written. A failed write is retried (client-go's backoff at once for
// conflicts and throttling, then per claim with a doubling delay up to
// MaxBackoff), counted in kube_rdma_claim_status_writes_total{result} and
// logged.
//
// It observes the agent (agent.View: the pools, the RDMA names of the
// claims' devices now) and imports no front end (internal/importrules);
// pkg/dra writes the claim records it reads. It changes nothing on the
// node.
package claimstatus

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceac "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/util/retry"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// Defaults and bounds.
const (
	DefaultInterval = 2 * time.Second
	MaxBackoff      = 5 * time.Minute
	firstBackoff    = time.Second
	callTimeout     = 10 * time.Second
)

// The condition of an entry whose netdev is in the pod.
const (
	ConditionReady = "Ready"
	ReasonAttached = "NetdevAttached"
)

// ErrClaimGone is Client's answer for a claim the API server no longer
// has under that name and UID: its state is forgotten, nothing retried.
var ErrClaimGone = errors.New("resource claim gone")

// Source is the agent's view of its pools (agent.Agent).
type Source interface {
	View() (agent.View, <-chan struct{})
}

// ClaimLister lists the DRA front end's claim records (claimrecord.ReadAll
// of its claims directory; a directory not there yet is no record).
type ClaimLister interface {
	Claims() ([]claimrecord.Record, error)
}

// RecordLister lists the CNI plugin's attachment records of this boot
// (attachment.Store.Records).
type RecordLister interface {
	Records() ([]attachment.Attachment, error)
}

// Client reads a claim and applies its status (Kube). Both answer
// ErrClaimGone (wrapped) for a claim of that name that is gone or has
// another UID.
type Client interface {
	Get(ctx context.Context, namespace, name, uid string) (*resourceapi.ResourceClaim, error)
	ApplyStatus(ctx context.Context, claim *resourceac.ResourceClaimApplyConfiguration) error
}

// Config is what a Writer needs.
type Config struct {
	Source  Source
	Claims  ClaimLister
	Records RecordLister
	Client  Client
	// ChainedPool is the chained CNI entry's pool (--cni-chained-pool):
	// claims of it, when it is a pool of frontend dra, get a status.
	ChainedPool string
	Interval    time.Duration // DefaultInterval
	Logger      *slog.Logger
	Now         func() time.Time // time.Now
}

// claimState is what the writer knows of one claim on the API server.
type claimState struct {
	// gone: the API server has no claim of this name and UID; kept, so
	// that nothing is asked again, while its record is there.
	gone     bool
	known    bool // have is the server's (read, or written since)
	have     entries
	since    map[devKey]time.Time // each entry's Ready since
	failures int
	retryAt  time.Time
}

// Writer keeps the claims' status as the records say.
type Writer struct {
	cfg Config
	log *slog.Logger

	writes  *prometheus.CounterVec
	pending prometheus.Gauge

	mu     sync.Mutex // Sync's, one at a time
	claims map[claimRef]*claimState
}

// New fills in Config's defaults.
func New(cfg Config) *Writer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Writer{cfg: cfg, log: cfg.Logger.With("component", "claimstatus"), claims: map[claimRef]*claimState{},
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kube_rdma_claim_status_writes_total",
			Help: "Applies of a DRA claim's status.devices entries (the pods' interfaces, IPs, MACs) by result: ok, error."}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kube_rdma_claim_status_pending",
			Help: "DRA claims whose status is not yet as the node's attachment records say (a write failed and waits for its retry)."}),
	}
}

// Describe implements prometheus.Collector.
func (w *Writer) Describe(ch chan<- *prometheus.Desc) {
	w.writes.Describe(ch)
	w.pending.Describe(ch)
}

// Collect implements prometheus.Collector.
func (w *Writer) Collect(ch chan<- prometheus.Metric) {
	w.writes.Collect(ch)
	w.pending.Collect(ch)
}

// Run syncs every Interval until ctx ends; it returns nil then. A sync
// that cannot list the records is logged at debug and tried again.
func (w *Writer) Run(ctx context.Context) error {
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	for {
		if err := w.Sync(ctx); err != nil {
			w.log.Debug("claim status sync skipped", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sync writes the status of every claim whose records say other than
// what the server holds, and forgets the claims that need nothing more.
func (w *Writer) Sync(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	view, _ := w.cfg.Source.View()
	pools := chainedPools(view, w.cfg.ChainedPool)
	var claims []claimrecord.Record
	var recs []attachment.Attachment
	if len(pools) > 0 {
		var err error
		if claims, err = w.cfg.Claims.Claims(); err != nil {
			return err
		}
		if recs, err = w.cfg.Records.Records(); err != nil {
			return err
		}
	}
	wanted := want(pools, claims, recs, netdevcheck.Names(view))
	refs := slices.Collect(maps.Keys(wanted))
	for ref := range w.claims {
		if _, ok := wanted[ref]; !ok {
			refs = append(refs, ref) // unprepared, or no longer of a chained pool: its entries go
		}
	}
	slices.SortFunc(refs, func(a, b claimRef) int { return strings.Compare(a.UID, b.UID) })
	now := w.cfg.Now()
	pending := 0
	for _, ref := range refs {
		if !w.sync(ctx, ref, wanted[ref], now) {
			pending++
		}
	}
	w.pending.Set(float64(pending))
	return nil
}

// sync brings one claim's status to want (nil: no entry of ours); false
// while a failed write waits for its retry.
func (w *Writer) sync(ctx context.Context, ref claimRef, want entries, now time.Time) bool {
	st := w.claims[ref]
	if st == nil {
		if len(want) == 0 {
			return true // nothing to write, nothing written
		}
		st = &claimState{}
		w.claims[ref] = st
	}
	if st.gone {
		if want == nil {
			delete(w.claims, ref)
		}
		return true
	}
	if now.Before(st.retryAt) {
		return false
	}
	log := w.log.With("claim", ref.Namespace+"/"+ref.Name, "uid", ref.UID)
	if !st.known {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		c, err := w.cfg.Client.Get(cctx, ref.Namespace, ref.Name, ref.UID)
		cancel()
		if errors.Is(err, ErrClaimGone) {
			w.forget(ref, want, log, err)
			return true
		}
		if err != nil {
			w.failed(st, now, log, "read the claim", err)
			return false
		}
		st.have, st.since = observed(c)
		st.known = true
	}
	if maps.Equal(st.have, want) {
		st.failures, st.retryAt = 0, time.Time{}
		if len(want) == 0 {
			delete(w.claims, ref)
		}
		return true
	}
	since := map[devKey]time.Time{}
	for k := range want {
		since[k] = st.since[k]
		if since[k].IsZero() || !st.have[k].Ready {
			since[k] = now
		}
	}
	err := retry.OnError(retry.DefaultBackoff, retriable, func() error {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		return w.cfg.Client.ApplyStatus(cctx, applyConfig(ref, want, since))
	})
	if errors.Is(err, ErrClaimGone) {
		w.forget(ref, want, log, err)
		return true
	}
	if err != nil {
		w.writes.WithLabelValues("error").Inc()
		w.failed(st, now, log, "apply the claim's status", err)
		return false
	}
	w.writes.WithLabelValues("ok").Inc()
	log.Info("claim status written", "devices", len(want))
	st.have, st.since, st.failures, st.retryAt = want, since, 0, time.Time{}
	if len(want) == 0 {
		delete(w.claims, ref)
	}
	return true
}

// forget drops a claim the API server no longer has, keeping it as gone
// while its record is there (want not nil).
func (w *Writer) forget(ref claimRef, want entries, log *slog.Logger, err error) {
	log.Debug("claim gone; its status is not written", "err", err)
	if want == nil {
		delete(w.claims, ref)
		return
	}
	w.claims[ref] = &claimState{gone: true}
}

// failed logs a failure and sets the claim's retry: 1 s, doubling to
// MaxBackoff.
func (w *Writer) failed(st *claimState, now time.Time, log *slog.Logger, what string, err error) {
	delay := firstBackoff << min(st.failures, 16)
	st.failures++
	delay = min(delay, MaxBackoff)
	st.retryAt = now.Add(delay)
	log.Warn("claim status not written: "+what, "err", err, "failures", st.failures, "retryIn", delay)
}

// retriable: errors worth trying again at once (client-go's backoff).
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
}

// applyConfig is the claim's status with exactly want's entries of ours:
// server-side apply removes those this field manager applied before and
// leaves out now. The UID keeps it to this claim, not one created again
// under its name.
func applyConfig(ref claimRef, want entries, since map[devKey]time.Time) *resourceac.ResourceClaimApplyConfiguration {
	status := resourceac.ResourceClaimStatus()
	keys := slices.SortedFunc(maps.Keys(want), func(a, b devKey) int {
		return strings.Compare(a.Pool+"/"+a.Device+"/"+a.ShareID, b.Pool+"/"+b.Device+"/"+b.ShareID)
	})
	for _, k := range keys {
		info := want[k]
		nd := resourceac.NetworkDeviceData().WithInterfaceName(info.IfName)
		if info.MAC != "" {
			nd.WithHardwareAddress(info.MAC)
		}
		if info.IPs != "" {
			nd.WithIPs(strings.Split(info.IPs, ",")...)
		}
		entry := resourceac.AllocatedDeviceStatus().
			WithDriver(claimrecord.DriverName).WithPool(k.Pool).WithDevice(k.Device)
		if k.ShareID != "" {
			entry.WithShareID(k.ShareID)
		}
		status.WithDevices(entry.
			WithNetworkData(nd).
			WithConditions(metav1ac.Condition().WithType(ConditionReady).WithStatus(metav1.ConditionTrue).
				WithReason(ReasonAttached).WithMessage("netdev " + info.IfName + " is in the pod").
				WithLastTransitionTime(metav1.NewTime(since[k].UTC().Truncate(time.Second)))))
	}
	return resourceac.ResourceClaim(ref.Name, ref.Namespace).WithUID(types.UID(ref.UID)).WithStatus(status)
}
