package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// A record of a previous boot names no netns and no device any more: the
// netns died with the boot and the kernel probed the NICs again on the host
// (a soft-RoCE device is re-created by whoever created it first). What
// outlives the boot is its IPAM lease: host-local keeps leases on disk under
// /var/lib/cni/networks/<network>/. So such a record is kept until IPAM DEL
// of each of its pod interfaces succeeded, then removed.
//
// A release that keeps failing (the IPAM plugin was removed with its
// network, its store is gone) must not keep the record forever, nor cost
// every ADD an IPAM exec for good; nor must a burst of ADDs right after a
// reboot, while the IPAM plugin's binary or data is not back yet, use up
// the tries within a second. So a record is given up only once both bounds
// are passed: previousTries failed releases, the first previousAge ago.
// Then it is removed with an error logged that names the lease left.
const (
	previousTries = 5
	previousAge   = time.Hour
	// previousBudget bounds the time one ADD or GC spends releasing the
	// leases of previous boots, so that a hung IPAM plugin holds up a new
	// pod's ADD only that long; what is left waits for the next one.
	previousBudget = 10 * time.Second
)

// releasePrevious releases the IPAM leases of recs, records of a previous
// boot, and removes each record released or given up. It takes each
// record's own lock, without waiting (an ADD, DEL or GC that holds it is
// releasing it), and not the node-wide lock: the records claim nothing.
// Failures are logged; the records stay for the next ADD, DEL or GC.
func (p *Plugin) releasePrevious(ctx context.Context, store attachment.Store, recs []attachment.Attachment, cniPath string, log *slog.Logger) {
	if len(recs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, previousBudget)
	defer cancel()
	for i, rec := range recs {
		if ctx.Err() != nil {
			log.Warn("records of a previous boot left for the next ADD, DEL or GC: out of time", "left", len(recs)-i)
			return
		}
		release, ok, err := store.Hold(rec.Key, false)
		if err != nil || !ok {
			continue // in hand elsewhere, or retried by the next one
		}
		// Read again under the hold: another process may have released and
		// removed it since the listing.
		if rec, err = store.LoadPrevious(rec.Key); err == nil {
			ipamType, ipamConf := recordedIPAM(rec)
			// A failure is logged and noted on the record, which the next
			// ADD, DEL or GC tries again: nothing for this caller to do.
			_ = p.settlePrevious(ctx, store, rec, ipamType, ipamConf, cniPath, log)
		}
		release()
	}
}

// settlePrevious releases what IPAM holds for rec, a record of a previous
// boot, and removes the record; a failed release is noted on the record,
// which stays, until it is given up (see previousTries). It returns the
// release's error when the record stays. Call it holding rec's own lock.
func (p *Plugin) settlePrevious(ctx context.Context, store attachment.Store, rec attachment.Attachment, ipamType string, ipamConf []byte,
	cniPath string, log *slog.Logger) error {
	log = log.With("containerID", rec.ContainerID, "ifName", rec.IfName, "network", rec.Network, "boot", rec.BootID)
	// The netns path is one of a previous boot: IPAM DEL gets none.
	gone := rec
	gone.Netns = ""
	err := p.releaseIPAM(ctx, gone, ipamType, ipamConf, "", cniPath)
	if err == nil {
		if err := store.Delete(rec.Key); err != nil {
			return err
		}
		if ipamType == "" {
			log.Info("removed the attachment record of a previous boot: no IPAM to release")
		} else {
			log.Info("released the IPAM lease of an attachment of a previous boot", "ipam", ipamType)
		}
		return nil
	}
	now := time.Now()
	r := rec.Release
	if r == nil {
		r = &attachment.Release{Since: now}
	}
	r.Tries++
	r.Err = err.Error()
	rec.Release = r
	if r.Tries >= previousTries && now.Sub(r.Since) >= previousAge {
		log.Error("GIVING UP the IPAM release of an attachment of a previous boot: its lease may be left allocated; "+
			"release it by hand (host-local: remove the file holding the container ID under /var/lib/cni/networks/<network>/)",
			"ipam", ipamType, "tries", r.Tries, "since", r.Since, "err", err)
		return store.Delete(rec.Key)
	}
	log.Warn("IPAM release of an attachment of a previous boot failed; record kept for the next ADD, DEL or GC",
		"ipam", ipamType, "tries", r.Tries, "since", r.Since, "err", err)
	if serr := store.SavePrevious(rec); serr != nil {
		err = errors.Join(err, serr)
	}
	return fmt.Errorf("release ipam of %s of a previous boot: %w", rec.Key, err)
}
