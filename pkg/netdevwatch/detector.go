// Package netdevwatch is the daemon's detector of pods that hold devices
// of a pool whose pods get netdevs through the CNI plugin (the chained
// pool, of the device plugin or of DRA, and gpuAligned pools) but have no
// complete attachment of them: pods whose sandbox was created while the
// kube-rdma entry was missing from the conflist (a restart window, an
// uninstall). It fails loudly in every mode, NRI or not: a
// Warning Event on the pod (RDMANetdevMissing), the series
// kube_rdma_pods_missing_netdev and kube_rdma_pods_missing_netdev_found_total,
// and the findings it hands the node-state publisher
// (status.podsWithoutNetdevs).
//
// Every Interval it lists the kubelet's allocations (PodResources), the DRA
// front end's claim records when the chained pool is a DRA pool (the pods
// they are reserved for hold the claims' devices; such a pod, known by its
// UID only, is named through the API server: PodFinder) and the CNI
// plugin's attachment records, and asks pkg/agent/netdevcheck, which is
// pure. A pod is flagged only a Grace after its sandbox was ready (the
// pod's PodReadyToStartContainers condition, through PodInfo), so an ADD in
// flight, or a pod still waiting for its volumes before its sandbox, is
// not; without PodInfo, a Grace after the detector first saw it missing.
//
// It observes the agent (agent.View) and imports no front end. It changes
// nothing: it neither deletes the pod nor touches its records.
package netdevwatch

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// Defaults of Config.
const (
	DefaultInterval = 15 * time.Second
	DefaultGrace    = 30 * time.Second
	callTimeout     = 10 * time.Second
)

// EventReason is the reason of the Warning Event posted on a flagged pod.
const EventReason = "RDMANetdevMissing"

// ErrPodNotFound is PodInfo's answer for a pod the API server does not
// have (deleted): it is not flagged.
var ErrPodNotFound = errors.New("pod not found")

// Source is the agent's view of its pools (agent.Agent).
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
// of its claims directory; a directory not there yet is no record).
type ClaimLister interface {
	Claims() ([]claimrecord.Record, error)
}

// PodStatus is what the detector needs of a pod from the API server.
type PodStatus struct {
	UID string
	// SandboxReady is when the pod's sandbox was created with its network
	// (condition PodReadyToStartContainers true); zero while it is not.
	SandboxReady time.Time
	// HostNetwork: spec.hostNetwork; no CNI ADD runs for such a pod.
	HostNetwork bool
}

// PodInfo reads a pod from the API server (Kube).
type PodInfo interface {
	Pod(ctx context.Context, namespace, name string) (PodStatus, error)
}

// PodFinder names the pod of a UID that a claim is reserved for (Kube: the
// claim's status.reservedFor), and reads it as PodInfo does: a claim record
// names its pods by UID only. ErrPodNotFound when the claim or the pod is
// gone.
type PodFinder interface {
	PodOfClaim(ctx context.Context, namespace, claim, podUID string) (name string, st PodStatus, err error)
}

// EventPoster posts a Warning Event on a pod (Kube).
type EventPoster interface {
	Warn(namespace, name, uid, reason, message string)
}

// Config is what a Detector needs.
type Config struct {
	Source Source
	Pods   PodLister
	// Records may be nil: no pod has an attachment then.
	Records RecordLister
	// ChainedPool is the chained CNI entry's pool (--cni-chained-pool).
	ChainedPool string
	// SharedNetdev: the chained entry gives pods of shared pools child
	// netdevs (--cni-shared-netdev macvlan or ipvlan); without it they get
	// none and are not checked (netdevcheck.Chain).
	SharedNetdev bool
	// Claims are the DRA front end's claim records; nil when the daemon
	// runs no DRA front end. With it, a ChainedPool that is not one of the
	// view's is the DRA front end's (netdevcheck.WithDRA) and the pods of
	// its claims are checked; Finder names them (nil: they are not).
	Claims ClaimLister
	Finder PodFinder
	// PodInfo and Events may be nil (no API server): findings then follow
	// the first sighting, and no Event is posted.
	PodInfo PodInfo
	Events  EventPoster
	// Interval between two checks (DefaultInterval); Grace after the
	// sandbox is ready before a pod is flagged (DefaultGrace).
	Interval, Grace time.Duration
	Logger          *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

type findingKey struct{ ns, pod, pool string }

type finding struct {
	missing netdevcheck.Missing
	seen    time.Time // first seen missing
	since   time.Time // the sandbox ready, else seen
	flagged bool
}

// Detector checks the node's pods for missing netdevs.
type Detector struct {
	cfg Config
	log *slog.Logger

	pods  prometheus.Gauge
	found prometheus.Counter

	seen map[findingKey]*finding // owned by Run

	mu      sync.Mutex
	flagged []v1alpha1.PodWithoutNetdevs
}

// New fills in Config's defaults.
func New(cfg Config) *Detector {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Detector{cfg: cfg, log: cfg.Logger.With("component", "netdevwatch"), seen: map[findingKey]*finding{},
		pods: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kube_rdma_pods_missing_netdev",
			Help: "Pods holding devices of a pool whose pods get netdevs through the CNI plugin (chained, DRA chained, gpuAligned) that have no complete attachment of them (Event " + EventReason + "; fix: delete the pod)."}),
		found: prometheus.NewCounter(prometheus.CounterOpts{Name: "kube_rdma_pods_missing_netdev_found_total",
			Help: "Pod and pool pairs found without their netdevs since the daemon started."}),
	}
}

// Describe and Collect make the detector a prometheus.Collector.
func (d *Detector) Describe(ch chan<- *prometheus.Desc) {
	d.pods.Describe(ch)
	d.found.Describe(ch)
}

// Collect implements prometheus.Collector.
func (d *Detector) Collect(ch chan<- prometheus.Metric) {
	d.pods.Collect(ch)
	d.found.Collect(ch)
}

// PodsWithoutNetdevs returns the current findings (nodestate.MissingNetdevs).
func (d *Detector) PodsWithoutNetdevs() []v1alpha1.PodWithoutNetdevs {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.flagged)
}

// Run checks every Interval until ctx ends; it returns nil then. Failures
// to list are logged at debug and the check is skipped: the publisher and
// the sweeper report PodResources' health.
func (d *Detector) Run(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Interval)
	defer t.Stop()
	for {
		if err := d.Check(ctx); err != nil {
			d.log.Debug("netdev check skipped", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Check runs one check: lists, decides, posts Events for new findings and
// updates the series and the findings.
func (d *Detector) Check(ctx context.Context) error {
	view, _ := d.cfg.Source.View()
	chain := netdevcheck.Chain{Pool: d.cfg.ChainedPool, SharedNetdev: d.cfg.SharedNetdev}
	netdev := netdevcheck.WithDRA(netdevcheck.Pools(view.Pools, chain), view.Pools, chain, d.cfg.Claims != nil)
	var ctrs []podresources.ContainerDevices
	if slices.ContainsFunc(slices.Collect(maps.Values(netdev)), func(w netdevcheck.Why) bool { return !w.DRA() }) {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		var err error
		ctrs, err = d.cfg.Pods.List(cctx)
		cancel()
		if err != nil {
			return err
		}
	}
	var claims []claimrecord.Record
	if slices.ContainsFunc(slices.Collect(maps.Values(netdev)), netdevcheck.Why.DRA) {
		var err error
		if claims, err = d.cfg.Claims.Claims(); err != nil {
			return err
		}
	}
	var recs []attachment.Attachment
	if d.cfg.Records != nil && (len(ctrs) > 0 || len(claims) > 0) {
		var err error
		if recs, err = d.cfg.Records.Records(); err != nil {
			return err
		}
	}
	held := holdings(ctrs, view.Pools, netdev)
	known := d.claimPods(ctx, held, claims, netdev, netdevcheck.Names(view), recs)
	now := d.cfg.Now()
	current := map[findingKey]bool{}
	for _, pod := range slices.SortedFunc(maps.Keys(held), func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	}) {
		p := netdevcheck.Pod{Namespace: pod[0], Name: pod[1]}
		miss := netdevcheck.Check(p, held[pod], netdev, recs)
		if len(miss) == 0 {
			continue
		}
		var ready time.Time
		var ok bool
		if st, found := known[pod]; found {
			p.UID = st.UID
			ready, ok = readiness(st, now)
		} else {
			ready, ok = d.sandboxReady(ctx, &p, now)
		}
		if !ok {
			continue
		}
		// With the pod's UID, records of an earlier pod of the same name
		// do not count.
		miss = netdevcheck.Check(p, held[pod], netdev, recs)
		for _, m := range miss {
			k := findingKey{p.Namespace, p.Name, m.Pool}
			current[k] = true
			f := d.seen[k]
			if f == nil {
				f = &finding{seen: now}
				d.seen[k] = f
			}
			f.missing = m
			f.since = ready
			if f.since.IsZero() {
				f.since = f.seen
			}
			if f.flagged || now.Sub(f.since) < d.cfg.Grace {
				continue
			}
			f.flagged = true
			d.found.Inc()
			msg := netdevcheck.Message(p, m)
			d.log.Warn("pod has no netdevs of its rdma devices", "pod", p.String(), "pool", m.Pool, "devices", m.Devices, "fix", netdevcheck.Fix)
			if d.cfg.Events != nil {
				d.cfg.Events.Warn(p.Namespace, p.Name, p.UID, EventReason, msg)
			}
		}
	}
	for k := range d.seen {
		if !current[k] {
			delete(d.seen, k)
		}
	}
	d.publish()
	return nil
}

// sandboxReady asks PodInfo when the pod's sandbox was ready and fills in
// its UID. ok is false for a pod not to look at now: gone from the API
// server, in the host's network namespace, or its sandbox not ready. Without PodInfo, or when the API server
// does not answer, ready is zero (the first sighting counts) and ok true.
func (d *Detector) sandboxReady(ctx context.Context, p *netdevcheck.Pod, now time.Time) (ready time.Time, ok bool) {
	if d.cfg.PodInfo == nil {
		return time.Time{}, true
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	st, err := d.cfg.PodInfo.Pod(cctx, p.Namespace, p.Name)
	switch {
	case errors.Is(err, ErrPodNotFound):
		return time.Time{}, false
	case err != nil:
		d.log.Debug("read pod failed; flagging by first sighting", "pod", p.String(), "err", err)
		return time.Time{}, true
	}
	p.UID = st.UID
	return readiness(st, now)
}

// readiness is sandboxReady's answer for a pod the API server has.
func readiness(st PodStatus, now time.Time) (ready time.Time, ok bool) {
	if st.HostNetwork || st.SandboxReady.IsZero() || st.SandboxReady.After(now) {
		return time.Time{}, false
	}
	return st.SandboxReady, true
}

// claimPods adds to held the holdings of the pods the claim records name
// (by UID) that have no complete attachment of them, under the names
// Finder gives them, and returns what it found of each. A pod the node
// does not run (its claim not unprepared yet) is left out; one Finder
// cannot name now (no API server) too, until it can.
func (d *Detector) claimPods(ctx context.Context, held map[[2]string][]netdevcheck.Holding, claims []claimrecord.Record,
	netdev map[string]netdevcheck.Why, names map[string]string, recs []attachment.Attachment) map[[2]string]PodStatus {
	known := map[[2]string]PodStatus{}
	pods := netdevcheck.ClaimPods(claims, netdev)
	for _, uid := range slices.Sorted(maps.Keys(pods)) {
		ns, claim := pods[uid].Namespace, pods[uid].Name
		h := netdevcheck.ClaimHoldings(uid, claims, netdev, names)
		if len(netdevcheck.Check(netdevcheck.Pod{Namespace: ns, UID: uid}, h, netdev, recs)) == 0 {
			continue
		}
		if d.cfg.Finder == nil {
			d.log.Debug("pod of a dra claim without its netdevs not named: no API server", "namespace", ns, "claim", claim, "uid", uid)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		name, st, err := d.cfg.Finder.PodOfClaim(cctx, ns, claim, uid)
		cancel()
		if err == nil && st.UID != uid {
			err = ErrPodNotFound // a pod of the same name, created again
		}
		if err != nil {
			if !errors.Is(err, ErrPodNotFound) {
				d.log.Debug("find the pod of a dra claim failed", "namespace", ns, "claim", claim, "uid", uid, "err", err)
			}
			continue
		}
		k := [2]string{ns, name}
		known[k] = st
		held[k] = append(held[k], h...)
	}
	return known
}

func (d *Detector) publish() {
	var out []v1alpha1.PodWithoutNetdevs
	pods := map[[2]string]bool{}
	for k, f := range d.seen {
		if !f.flagged {
			continue
		}
		pods[[2]string{k.ns, k.pod}] = true
		out = append(out, v1alpha1.PodWithoutNetdevs{Namespace: k.ns, Pod: k.pod, Pool: k.pool, Why: string(f.missing.Why),
			Devices: slices.Clone(f.missing.Devices), Since: metav1.NewTime(f.since.UTC().Truncate(time.Second))})
	}
	slices.SortFunc(out, func(a, b v1alpha1.PodWithoutNetdevs) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Pod, b.Pod), strings.Compare(a.Pool, b.Pool))
	})
	d.pods.Set(float64(len(pods)))
	d.mu.Lock()
	d.flagged = out
	d.mu.Unlock()
}

// holdings groups the allocations of netdev pools by pod: the RDMA devices
// behind the kubelet's IDs, a gpuAligned pool's slot IDs as they are.
func holdings(ctrs []podresources.ContainerDevices, pools []agent.PoolView, netdev map[string]netdevcheck.Why) map[[2]string][]netdevcheck.Holding {
	byResource := map[string]agent.PoolView{}
	for _, p := range pools {
		if _, ok := netdev[p.Name]; ok {
			byResource[p.Resource] = p
		}
	}
	out := map[[2]string][]netdevcheck.Holding{}
	for _, c := range ctrs {
		p, ok := byResource[c.Resource]
		if !ok || len(c.DeviceIDs) == 0 {
			continue
		}
		h := netdevcheck.Holding{Pool: p.Name}
		for _, id := range c.DeviceIDs {
			if netdev[p.Name] == netdevcheck.GPUAligned {
				h.Devices = append(h.Devices, id)
				continue
			}
			h.Devices = append(h.Devices, p.ByID[id]...)
		}
		k := [2]string{c.Namespace, c.Pod}
		out[k] = append(out[k], h)
	}
	return out
}
