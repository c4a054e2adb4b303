package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Reclaim is DEL for attachments whose DEL never came: a runtime that
// never retried a DEL, or that called it while kube-rdma was not in its
// conflist, leaves the record, and with it the claim on its devices, for
// good (every later pod given one of them fails with code 101). The node
// agent finds such records (pkg/cnireclaim decides which: pod netns gone,
// pod unknown to the kubelet) and passes their keys here; this is the
// library entry point that lets it run DEL's own restore in its process
// rather than exec the plugin with a made-up netconf.
//
// ReclaimOpts say where: the state directory (its boot ID the current
// boot's), the CNI bin directory the IPAM plugins are run from, and the
// sysfs root that tells a NIC on its way back from one that is gone.
type ReclaimOpts struct {
	Store     attachment.Store
	CNIPath   string
	SysfsRoot string
}

// ReclaimResult is what Reclaim did with one key.
type ReclaimResult struct {
	Key attachment.Key
	Pod *attachment.PodRef
	// Skipped says why nothing was done ("" when something was): the
	// record is gone, an ADD or DEL holds the attachment, its netns is back.
	Skipped string
	// Err is nil once the devices are back, IPAM released and the record
	// removed; otherwise the record stays (its returned devices marked so,
	// which frees their claim) for the next pass, DEL or GC.
	Err error
}

// Reclaim returns the devices of each attachment of keys to the host as
// DEL does (found by MAC under their host name, pod name, a temporary or a
// kernel "devN" name; name, MAC, MTU and up state restored), releases what
// IPAM holds for it (the IPAM configuration recorded at ADD, the plugin
// from opts.CNIPath) and removes its record. It takes the node-wide lock
// and each attachment's own lock as DEL and GC do, so it never acts beside
// an ADD or DEL in flight: an attachment whose own lock is held is skipped.
// A record whose pod netns path exists again is skipped: Reclaim acts on
// pods whose netns is gone only. The IPAM leases of records of a previous
// boot are released too (as ADD and GC do).
//
// The NetdevReturnWait of p bounds the wait of the pass for the NICs not
// back yet, without the node-wide lock: the agent's plugin sets it short
// and tries again on its next pass (ErrNetdevNotBack), until NetdevGiveUp.
func (p *Plugin) Reclaim(ctx context.Context, opts ReclaimOpts, keys []attachment.Key) []ReclaimResult {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	store := opts.Store
	out := make([]ReclaimResult, 0, len(keys))
	lk := &nodeLock{store: store}
	if err := lk.acquire(); err != nil {
		for _, k := range keys {
			out = append(out, ReclaimResult{Key: k, Err: err})
		}
		return out
	}
	defer lk.release()
	deadline := p.returnDeadline()
	_, prev, _ := store.List()
	type pending struct {
		res     int // index in out
		rec     attachment.Attachment
		release func()
	}
	var todo []pending
	defer func() {
		for _, t := range todo {
			t.release()
		}
	}()
	for _, k := range keys {
		r := ReclaimResult{Key: k}
		release, ok, err := store.Hold(k, false)
		switch {
		case err != nil:
			r.Err = err
		case !ok:
			r.Skipped = "in flight: an ADD, DEL or GC holds it"
		}
		if r.Err != nil || r.Skipped != "" {
			out = append(out, r)
			continue
		}
		rec, err := store.Load(k)
		if err != nil {
			release()
			if errors.Is(err, attachment.ErrNotFound) {
				r.Skipped = "no record any more"
			} else {
				r.Err = err
			}
			out = append(out, r)
			continue
		}
		r.Pod = rec.Pod
		if rec.Netns != "" {
			if _, err := os.Stat(rec.Netns); err == nil {
				release()
				r.Skipped = "pod netns exists"
				out = append(out, r)
				continue
			}
		}
		l := log.With("containerID", rec.ContainerID, "ifName", rec.IfName, "netns", rec.Netns)
		rerr := p.returnDevices("reclaim", netns.None(), &rec, p.Resolver(opts.SysfsRoot), lk, deadline, l)
		if err := store.Save(rec); err != nil {
			rerr = errors.Join(rerr, err)
		}
		r.Err = rerr
		out = append(out, r)
		todo = append(todo, pending{res: len(out) - 1, rec: rec, release: release})
	}
	lk.release()
	p.releasePrevious(ctx, store, prev, opts.CNIPath, log)
	for _, t := range todo {
		ipamType, ipamConf := recordedIPAM(t.rec)
		err := errors.Join(out[t.res].Err, p.releaseIPAM(ctx, t.rec, ipamType, ipamConf, "", opts.CNIPath))
		if err == nil {
			err = store.Delete(t.rec.Key)
		}
		if err != nil {
			out[t.res].Err = fmt.Errorf("reclaim %s: %w", t.rec.Key, err)
		}
	}
	return out
}

// ReturnedByKernel reports whether the kernel has given rec's NICs back to
// the host: each of its hardware devices not yet returned is in the host
// netns (by MAC, under a name findOnHost knows), and there is at least one.
// A physical netdev leaves a pod netns only when the netns is destroyed,
// so with the pod's netns path gone this is proof the attachment is dead,
// whatever the kubelet says (a pool selecting the NIC by name has lost it
// while it sits under "net1" or "devN"). Read without the lock: a hint,
// which Reclaim acts on under it.
func (p *Plugin) ReturnedByKernel(rec attachment.Attachment) bool {
	n := 0
	for _, d := range rec.Devices {
		// A child dies with its netns; nothing comes back to prove it.
		if d.Returned || d.SoftType != "" || d.Child != "" {
			continue
		}
		if _, ok, err := p.findOnHost(d, nil); err != nil || !ok {
			return false
		}
		n++
	}
	return n > 0
}

// NewReclaimer returns a Plugin with the real dependencies, for Reclaim in
// the node agent's process: the current network namespace (the daemon's
// host network) as the host, bootID's records, IPAM plugins exec'd from
// the CNI path Reclaim is given, and wait as NetdevReturnWait. NICs it
// gives up go to the give-up spool of stateDir (the CNI plugin's state
// directory, package cniops), where the daemon's drain of the plugin's
// give-ups reports them as it reports the plugin's own; "" leaves them to
// the log. Close the HostNS handle when done.
func NewReclaimer(log *slog.Logger, bootID string, wait time.Duration, stateDir string) (*Plugin, error) {
	host, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("open current netns: %w", err)
	}
	return &Plugin{
		HostNS:           host,
		BootID:           bootID,
		Links:            rdma.Netdevs{},
		Addrs:            routeAddrs{},
		RDMA:             rdma.Devices{},
		IPAM:             execIPAM{},
		Resolver:         func(root string) Resolver { return discovery.Scanner{SysRoot: root} },
		Log:              log,
		SoftRDMAWait:     2 * time.Second,
		NetdevReturnWait: wait,
		NetdevGiveUp:     DefaultNetdevGiveUp,
		Node:             netconf.Node{StateDir: stateDir},
	}, nil
}
