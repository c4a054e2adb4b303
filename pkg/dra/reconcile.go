package dra

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// ClaimWatcher keeps one watch per prepared claim and unprepares a claim
// whose ResourceClaim goes from the API server: deleted, or deleted and
// created again under its name (another UID). A claim cannot be deleted
// while a pod reserves it (the API server keeps it until reservedFor is
// empty), so its record is an orphan then: the kubelet's Unprepare never
// reached this daemon (down, or restarting, at that moment), and the record
// would otherwise hold its devices until a reboot.
//
// Every Interval it reads the records (local files, no API call) and starts
// a watch for each new one and ends those of records gone. A watch is one
// LIST and one WATCH of the claim's name (a field selector), re-established
// from its last resource version when the API server ends it: in a steady
// state no request per claim per interval, where a GET per claim every 30 s
// was ~530 GETs/s at 2,000 nodes with 8 claims each. The Driver runs one;
// the scale harness (hack/scale) runs them for simulated nodes to count
// their requests.
type ClaimWatcher struct {
	Kube kubernetes.Interface
	// Records are the prepared claims (the claim records).
	Records func() ([]claimrecord.Record, error)
	// Unprepare unprepares the claim with a UID whose claim is gone.
	Unprepare func(uid string) error
	Log       *slog.Logger
	Interval  time.Duration
}

func (d *Driver) reconcileLoop(ctx context.Context) {
	w := &ClaimWatcher{Kube: d.cfg.KubeClient, Records: d.prep.Prepared, Unprepare: d.unprepareGone,
		Log: d.log, Interval: d.cfg.ReconcileInterval}
	w.Run(ctx)
}

// unprepareGone unprepares a claim whose ResourceClaim is gone, and removes
// the device metadata the kubelet plugin helper wrote for it: the helper
// removes it only at the kubelet's Unprepare, which never came. Whether or
// not metadata is on now: an earlier run may have written it.
func (d *Driver) unprepareGone(uid string) error {
	recs, _ := d.prep.Prepared()
	i := slices.IndexFunc(recs, func(r claimrecord.Record) bool { return r.UID == uid })
	if err := d.prep.Unprepare(uid); err != nil {
		return err
	}
	if i < 0 {
		return nil
	}
	cdi := d.cfg.CDIDir
	if cdi == "" {
		cdi = kubeletplugin.DefaultCDIDir
	}
	return removeMetadata(d.cfg.PluginDir, cdi, recs[i].Namespace, recs[i].Name, uid)
}

// Run watches until ctx ends.
func (w *ClaimWatcher) Run(ctx context.Context) {
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	watches := map[string]context.CancelFunc{} // by claim UID
	defer func() {
		for _, cancel := range watches {
			cancel()
		}
	}()
	for {
		w.syncClaimWatches(ctx, watches)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// syncClaimWatches starts a watch for every record without one and ends
// the watches of records gone (unprepared).
func (w *ClaimWatcher) syncClaimWatches(ctx context.Context, watches map[string]context.CancelFunc) {
	recs, err := w.Records()
	if err != nil {
		w.Log.Warn("reconcile claims: read the records", "err", err)
		return
	}
	live := map[string]bool{}
	for _, r := range recs {
		live[r.UID] = true
		if watches[r.UID] != nil {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		watches[r.UID] = cancel
		go w.watchClaim(wctx, r)
	}
	for uid, cancel := range watches {
		if !live[uid] {
			cancel()
			delete(watches, uid)
		}
	}
}

// watchClaim watches the claim of record r until ctx ends or the claim is
// gone, when it unprepares r. Errors of the API server (away, forbidden)
// leave the record alone and are retried with back-off.
func (w *ClaimWatcher) watchClaim(ctx context.Context, r claimrecord.Record) {
	claims := w.Kube.ResourceV1().ResourceClaims(r.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", r.Name).String()
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = sel
		return claims.Watch(ctx, o)
	}}
	delay := time.Second
	for ctx.Err() == nil {
		gone, err := w.claimGone(ctx, claims.List, sel, r.UID, lw)
		if ctx.Err() != nil {
			return
		}
		if gone && w.unprepareOrphan(r) {
			return
		}
		if err != nil {
			w.Log.Debug("reconcile claims: watch claim", "claim", r.Namespace+"/"+r.Name, "err", err, "retryIn", delay)
		}
		// Jittered so that a node's watches do not come back in step after
		// an API server restart.
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay/2 + rand.N(delay/2+1)):
		}
		delay = min(2*delay, 5*time.Minute)
	}
}

// claimGone lists the claim by name and, while it is there with uid,
// watches it from the list's resource version. It returns true once the
// claim is gone or another UID holds its name, and false with the reason
// when the list failed or the watch ended with an error (the caller lists
// again after a pause).
func (w *ClaimWatcher) claimGone(ctx context.Context, list func(context.Context, metav1.ListOptions) (*resourceapi.ResourceClaimList, error),
	sel, uid string, lw cache.WatcherWithContext) (bool, error) {
	l, err := list(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return false, err
	}
	if !holds(l.Items, uid) {
		return true, nil
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, l.ResourceVersion, lw)
	if err != nil {
		return false, err
	}
	defer rw.Stop()
	for ev := range rw.ResultChan() {
		switch ev.Type {
		case watch.Deleted:
			if c, ok := ev.Object.(*resourceapi.ResourceClaim); ok && string(c.UID) == uid {
				return true, nil
			}
		case watch.Added, watch.Modified:
			if c, ok := ev.Object.(*resourceapi.ResourceClaim); ok && string(c.UID) != uid {
				return true, nil
			}
		case watch.Error:
			// The resource version expired (410): list again.
			return false, apierrors.FromObject(ev.Object)
		}
	}
	return false, ctx.Err()
}

// holds reports whether one of items has uid.
func holds(items []resourceapi.ResourceClaim, uid string) bool {
	for _, c := range items {
		if string(c.UID) == uid {
			return true
		}
	}
	return false
}

// unprepareOrphan unprepares the record of a claim gone from the API
// server; false when that failed (tried again after a pause).
func (w *ClaimWatcher) unprepareOrphan(r claimrecord.Record) bool {
	// The usual order: the kubelet's Unprepare removed the record, then the
	// claim went (a pod's generated claim is deleted after the pod).
	recs, err := w.Records()
	if err == nil && !slices.ContainsFunc(recs, func(x claimrecord.Record) bool { return x.UID == r.UID }) {
		return true
	}
	if err := w.Unprepare(r.UID); err != nil {
		w.Log.Error("reconcile claims: unprepare a claim that is gone", "claim", r.Namespace+"/"+r.Name, "uid", r.UID, "err", err)
		return false
	}
	w.Log.Warn("unprepared a claim that is gone from the API server (its Unprepare never came); its devices are free",
		"claim", r.Namespace+"/"+r.Name, "uid", r.UID, "devices", len(r.Devices))
	return true
}
