// Package cnireclaim is the node agent's reclaimer of the CNI plugin's
// attachments whose DEL never came: every pass it reads
// the attachment records, decides which belong to a pod that is gone, and
// has the CNI plugin's own restore (cni.Plugin.Reclaim, the code DEL runs)
// return their devices, release their IPAM leases and remove the records.
//
// An attachment is reclaimed when its pod netns path no longer exists and
// either
//
//   - the kernel has given its NICs back to the host (a physical netdev
//     leaves a netns only when the netns dies): at once, whatever the
//     kubelet says, so a pool that selects the NIC by netdev name finds it
//     again within one pass;
//   - the kubelet's PodResources List no longer shows its pod (by namespace
//     and name: List carries no UID, so a pod re-created under the same
//     name keeps the record until that pod is gone too);
//   - PodResources is not configured or does not answer, and the netns has
//     been seen gone for Grace: the netns test alone, given time.
//
// A netns path the daemon cannot judge (under /proc, whose PIDs are not the
// host's in the daemon's container, or in a directory the daemon does not
// see) is never reclaimed: only DEL or GC finish it.
//
// It owns the pass, its schedule and its metric; it does no netlink and no
// locking itself (cni.Plugin.Reclaim takes the plugin's node-wide lock and
// per-attachment holds). The daemon's restore is the installed plugin's
// (ExecRestorer runs `kube-rdma reclaim` from the CNI bin directory), so the
// records are always restored by the release that wrote them.
package cnireclaim

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// DefaultInterval is the time between two passes.
const DefaultInterval = 30 * time.Second

// Restorer runs the CNI plugin's restore. *cni.Plugin (the linked copy)
// and ExecRestorer (the installed binary, the daemon's) implement it.
type Restorer interface {
	Reclaim(ctx context.Context, opts cni.ReclaimOpts, keys []attachment.Key) []cni.ReclaimResult
	ReturnedByKernel(rec attachment.Attachment) bool
}

// Pods lists the pods the kubelet knows (PodResources List).
// podresources.Client implements it.
type Pods interface {
	List(ctx context.Context) ([]podresources.ContainerDevices, error)
}

// Config is the reclaimer's.
type Config struct {
	Restorer Restorer
	// Opts is where the plugin's state, IPAM plugins and sysfs are.
	Opts cni.ReclaimOpts
	// Pods is the kubelet's PodResources; nil: not configured (the netns
	// test and Grace only).
	Pods Pods
	// Interval between passes; Grace is how long a record whose netns is
	// gone waits when the kubelet cannot be asked (0: 2 × Interval).
	Interval, Grace time.Duration
	// Namespace prefixes the metric's name (agent.MetricsNamespace).
	Namespace string
	Logger    *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Reclaimer runs the passes.
type Reclaimer struct {
	cfg       Config
	reclaimed *prometheus.CounterVec

	mu   sync.Mutex
	seen map[attachment.Key]time.Time // first pass that found the netns gone
}

// New returns a reclaimer; register it as a prometheus.Collector for its
// metric.
func New(cfg Config) *Reclaimer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 2 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reclaimer{cfg: cfg, seen: map[attachment.Key]time.Time{},
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: cfg.Namespace, Name: "cni_attachments_reclaimed_total",
			Help: "CNI attachments whose DEL never came, reclaimed by the daemon (devices returned, IPAM released, record removed), by result (success, failure)."},
			[]string{"result"}),
	}
}

// Describe implements prometheus.Collector.
func (r *Reclaimer) Describe(ch chan<- *prometheus.Desc) { r.reclaimed.Describe(ch) }

// Collect implements prometheus.Collector.
func (r *Reclaimer) Collect(ch chan<- prometheus.Metric) { r.reclaimed.Collect(ch) }

// Run makes a pass every Interval until ctx ends.
func (r *Reclaimer) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		r.Pass(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass reclaims what is gone now and returns what the plugin did with each
// record it was given.
func (r *Reclaimer) Pass(ctx context.Context) []cni.ReclaimResult {
	recs, err := r.cfg.Opts.Store.Records()
	if err != nil {
		r.cfg.Logger.Warn("cannot read the CNI plugin's attachment records", "err", err)
		return nil
	}
	now := r.cfg.Now()
	var candidates []attachment.Attachment
	live := map[attachment.Key]bool{}
	for _, rec := range recs {
		live[rec.Key] = true
		if netnsGone(rec.Netns) {
			candidates = append(candidates, rec)
		}
	}
	var listed map[[2]string]bool
	if len(candidates) > 0 && r.cfg.Pods != nil {
		listed, err = r.listed(ctx)
		if err != nil {
			r.cfg.Logger.Info("kubelet PodResources unavailable; records whose netns is gone wait for the grace period", "grace", r.cfg.Grace, "err", err)
		}
	}
	r.mu.Lock()
	for k := range r.seen {
		if !live[k] {
			delete(r.seen, k)
		}
	}
	var keys []attachment.Key
	for _, rec := range candidates {
		first, ok := r.seen[rec.Key]
		if !ok {
			first = now
			r.seen[rec.Key] = now
		}
		why := ""
		switch {
		case r.cfg.Restorer.ReturnedByKernel(rec):
			why = "the kernel returned its NICs to the host"
		case listed != nil && rec.Pod != nil && listed[[2]string{rec.Pod.Namespace, rec.Pod.Name}]:
			continue // the kubelet still has the pod: DEL will come
		case listed != nil && rec.Pod != nil:
			why = "the kubelet no longer lists its pod"
		case now.Sub(first) >= r.cfg.Grace:
			why = "its netns has been gone for the grace period"
		default:
			continue
		}
		r.cfg.Logger.Info("reclaiming a CNI attachment whose DEL never came", "containerID", rec.ContainerID, "ifName", rec.IfName,
			"pod", podName(rec.Pod), "netns", rec.Netns, "why", why)
		keys = append(keys, rec.Key)
	}
	r.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	res := r.cfg.Restorer.Reclaim(ctx, r.cfg.Opts, keys)
	for _, x := range res {
		switch {
		case x.Skipped != "":
			r.cfg.Logger.Info("attachment not reclaimed", "containerID", x.Key.ContainerID, "ifName", x.Key.IfName, "why", x.Skipped)
		case x.Err != nil:
			r.reclaimed.WithLabelValues("failure").Inc()
			r.cfg.Logger.Warn("reclaiming a CNI attachment failed; record kept for the next pass, DEL or GC", "containerID", x.Key.ContainerID,
				"ifName", x.Key.IfName, "pod", podName(x.Pod), "err", x.Err)
		default:
			r.reclaimed.WithLabelValues("success").Inc()
			r.cfg.Logger.Info("reclaimed a CNI attachment: devices back on the host, IPAM released, record removed",
				"containerID", x.Key.ContainerID, "ifName", x.Key.IfName, "pod", podName(x.Pod))
		}
	}
	return res
}

// listed returns the pods the kubelet lists, by namespace and name.
func (r *Reclaimer) listed(ctx context.Context) (map[[2]string]bool, error) {
	ctrs, err := r.cfg.Pods.List(ctx)
	if err != nil {
		return nil, err
	}
	out := map[[2]string]bool{}
	for _, c := range ctrs {
		out[[2]string{c.Namespace, c.Pod}] = true
	}
	return out, nil
}

// netnsGone reports whether the pod netns path is known to be gone: it does
// not exist and its directory does. A path under /proc names a process of
// the host's PID namespace, which is not the daemon's: never judged.
func netnsGone(path string) bool {
	if path == "" || !filepath.IsAbs(path) || strings.HasPrefix(filepath.Clean(path), "/proc/") {
		return false
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	fi, err := os.Stat(filepath.Dir(path))
	return err == nil && fi.IsDir()
}

func podName(p *attachment.PodRef) string {
	if p == nil {
		return ""
	}
	return p.Namespace + "/" + p.Name
}
