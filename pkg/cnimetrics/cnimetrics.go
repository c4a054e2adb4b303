// Package cnimetrics is the daemon's side of the CNI plugin's operations
// spool (package cniops): every Interval it drains the spool and counts
// each record in kube_rdma_cni_operations_total{command,pool,code} and
// kube_rdma_cni_operation_duration_seconds{command,pool}, and the lines it
// could not read in kube_rdma_cni_spool_lines_dropped_total{reason}. It
// drains the give-up spool beside it too (cniops.DrainGiveUps): each NIC a
// DEL or GC gave up on is logged as an error, counted in
// kube_rdma_cni_devices_given_up_total{reason}, and, with an Events poster,
// posted as a Warning Event (reason RDMADeviceGivenUp) on the pod that had
// it when the record named one.
//
// It owns those series and the spool's removal, nothing else: it does not
// run CNI commands, read attachment records or touch the agent. The
// daemon's cmd/device-plugin wires it in with --cni-metrics-dir and
// registers it on /metrics (agent.RegisterCollector).
package cnimetrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// DefaultInterval is how often the spool is drained. A record shows on
// /metrics within two intervals (Drain reads a file one call after it
// takes it).
const DefaultInterval = 5 * time.Second

// Buckets of kube_rdma_cni_operation_duration_seconds: 5ms to 10s, the
// span from a DEL with nothing to do to an ADD at a runtime's patience.
var Buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Config is the collector's setup.
type Config struct {
	// Dir is the spool directory (cniops.Dir of the CNI state dir).
	Dir string
	// Interval between drains; DefaultInterval when zero.
	Interval time.Duration
	Logger   *slog.Logger
	// Events posts the give-ups on their pods; nil: logged and counted
	// only (no API server).
	Events EventPoster
}

// EventPoster posts a Warning Event on a pod (netdevwatch.Kube is one).
type EventPoster interface {
	Warn(namespace, name, uid, reason, message string)
}

// EventReasonGivenUp is the reason of the Event posted on a pod whose NIC
// a DEL or GC gave up on.
const EventReasonGivenUp = "RDMADeviceGivenUp"

// Collector drains the spool and holds the series; a prometheus.Collector.
type Collector struct {
	cfg      Config
	log      *slog.Logger
	ops      *prometheus.CounterVec
	duration *prometheus.HistogramVec
	dropped  *prometheus.CounterVec
	givenUp  *prometheus.CounterVec
	warned   bool

	mu     sync.Mutex
	recent []cniops.GiveUp // the last MaxRecentGiveUps, oldest first
}

// MaxRecentGiveUps is how many give-ups GiveUps keeps (the node state's
// status.givenUp bound).
const MaxRecentGiveUps = 32

// RecentGiveUps is how old a give-up GiveUps still returns.
const RecentGiveUps = 24 * time.Hour

// New returns a collector of cfg.Dir's spool; Run drains it.
func New(cfg Config) *Collector {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Collector{cfg: cfg, log: cfg.Logger.With("component", "cni-metrics"),
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kube_rdma_cni_operations_total",
			Help: "CNI plugin commands (ADD, DEL, CHECK, GC, STATUS) on this node, by pool and CNI error code (0: success)."},
			[]string{"command", "pool", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kube_rdma_cni_operation_duration_seconds",
			Help: "Time of a CNI plugin command in the plugin, from its main to its result, by command and pool.", Buckets: Buckets},
			[]string{"command", "pool"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kube_rdma_cni_spool_lines_dropped_total",
			Help: "Lines of the CNI plugin's operations spool the daemon could not count, by reason (malformed: a torn write or garbage; newer: a newer plugin's format)."},
			[]string{"reason"}),
	}
	c.givenUp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kube_rdma_cni_devices_given_up_total",
		Help: "NICs the CNI plugin's DEL or GC gave up on, by reason (function-gone: its PCI function or SF left the node; not-back: its netdev did not come back from the pod's netns in time; vanished: its netdev was in neither the pod's netns nor the host's). The attachment ended without them; each rejoins its pool when its netdev reappears."},
		[]string{"reason"})
	for _, r := range []string{"malformed", "newer"} {
		c.dropped.WithLabelValues(r)
	}
	for _, r := range []string{cniops.GiveUpGone, cniops.GiveUpNotBack, cniops.GiveUpVanished} {
		c.givenUp.WithLabelValues(r)
	}
	return c
}

// Run drains the spool every Interval until ctx ends, and once more then,
// so that a stopping daemon leaves only what arrived after. It returns nil.
func (c *Collector) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.Drain()
		select {
		case <-ctx.Done():
			c.Drain()
			return nil
		case <-t.C:
		}
	}
}

// Drain counts the records the spool holds now (those Drain took the time
// before) and removes them.
func (c *Collector) Drain() {
	st, err := cniops.Drain(c.cfg.Dir, c.count)
	if err != nil {
		c.log.Warn("drain the CNI operations spool", "dir", c.cfg.Dir, "err", err)
	}
	c.dropped.WithLabelValues("malformed").Add(float64(st.Malformed))
	c.dropped.WithLabelValues("newer").Add(float64(st.Newer))
	if st.NewerErr != nil && !c.warned {
		c.warned = true
		c.log.Warn("CNI operation records of a newer plugin not counted", "err", st.NewerErr)
	}
	st, err = cniops.DrainGiveUps(c.cfg.Dir, c.givenUpOne)
	if err != nil {
		c.log.Warn("drain the CNI give-up spool", "dir", c.cfg.Dir, "err", err)
	}
	c.dropped.WithLabelValues("malformed").Add(float64(st.Malformed))
	c.dropped.WithLabelValues("newer").Add(float64(st.Newer))
	if st.NewerErr != nil {
		c.log.Warn("CNI give-up records of a newer plugin not read", "err", st.NewerErr)
	}
}

// givenUpOne reports one give-up: an error in the log, the counter, and an
// Event on its pod.
func (c *Collector) givenUpOne(g cniops.GiveUp) {
	c.givenUp.WithLabelValues(g.Reason).Inc()
	c.mu.Lock()
	c.recent = append(c.recent, g)
	if n := len(c.recent); n > MaxRecentGiveUps {
		c.recent = slices.Delete(c.recent, 0, n-MaxRecentGiveUps)
	}
	c.mu.Unlock()
	why := "its netdev did not come back from the pod's network namespace within " + g.Waited.Round(time.Second).String()
	switch g.Reason {
	case cniops.GiveUpGone:
		why = "its PCI function or auxiliary device " + g.Function + " is no longer on the node"
	case cniops.GiveUpVanished:
		why = "its netdev was neither in the pod's network namespace nor on the host (the NIC was removed while the pod had it)"
	}
	msg := fmt.Sprintf("%s gave up RDMA device %s (netdev %s on the host, %s in the pod, %s): %s. The pod's attachment ended without it; "+
		"the device rejoins its pool when its netdev is back on the host", g.Command, g.RDMA, g.Netdev, cmp.Or(g.PodIfName, "?"), g.Function, why)
	c.log.Error("the CNI plugin gave up a NIC", "command", g.Command, "rdma", g.RDMA, "netdev", g.Netdev, "function", g.Function,
		"reason", g.Reason, "waited", g.Waited, "containerID", g.ContainerID, "ifName", g.IfName, "podIfName", g.PodIfName,
		"pod", g.PodNamespace+"/"+g.PodName, "podUID", g.PodUID, "at", g.Time)
	if c.cfg.Events != nil && g.PodName != "" && g.PodNamespace != "" {
		c.cfg.Events.Warn(g.PodNamespace, g.PodName, g.PodUID, EventReasonGivenUp, msg)
	}
}

// GiveUps returns the give-ups drained since the collector started that are
// at most RecentGiveUps old at now, newest first, at most MaxRecentGiveUps:
// what the node state publishes (nodestate.GiveUps).
func (c *Collector) GiveUps(now time.Time) []cniops.GiveUp {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []cniops.GiveUp
	for _, g := range slices.Backward(c.recent) {
		if now.Sub(g.Time) <= RecentGiveUps {
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b cniops.GiveUp) int { return b.Time.Compare(a.Time) })
	return out
}

func (c *Collector) count(r cniops.Record) {
	c.ops.WithLabelValues(r.Command, r.Pool, strconv.FormatUint(uint64(r.Code), 10)).Inc()
	c.duration.WithLabelValues(r.Command, r.Pool).Observe(r.Duration.Seconds())
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.ops.Describe(ch)
	c.duration.Describe(ch)
	c.dropped.Describe(ch)
	c.givenUp.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.ops.Collect(ch)
	c.duration.Collect(ch)
	c.dropped.Collect(ch)
	c.givenUp.Collect(ch)
}
