package dra

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reconcileLoop unprepares, every ReconcileInterval, the prepared claims
// whose ResourceClaim is gone from the API server.
func (d *Driver) reconcileLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.reconcile(ctx)
		}
	}
}

// reconcile unprepares the records of claims that no longer exist: the API
// server answers NotFound for the claim's name, or has a claim of that name
// with another UID (deleted and created again). A claim cannot be deleted
// while a pod reserves it (the API server keeps it until reservedFor is
// empty), so its record is an orphan: the kubelet's Unprepare never reached
// this daemon (down, or restarting, at that moment), and the record would
// otherwise hold its devices until a reboot. Any other answer (the API
// server away, forbidden) leaves the record alone.
func (d *Driver) reconcile(ctx context.Context) {
	recs, err := d.prep.Prepared()
	if err != nil {
		d.log.Warn("reconcile claims: read the records", "err", err)
		return
	}
	for _, r := range recs {
		c, err := d.cfg.KubeClient.ResourceV1().ResourceClaims(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			d.log.Debug("reconcile claims: get claim", "claim", r.Namespace+"/"+r.Name, "err", err)
			continue
		case string(c.UID) == r.UID:
			continue
		}
		if err := d.prep.Unprepare(r.UID); err != nil {
			d.log.Error("reconcile claims: unprepare a claim that is gone", "claim", r.Namespace+"/"+r.Name, "uid", r.UID, "err", err)
			continue
		}
		d.log.Warn("unprepared a claim that is gone from the API server (its Unprepare never came); its devices are free",
			"claim", r.Namespace+"/"+r.Name, "uid", r.UID, "devices", len(r.Devices))
	}
}
