package cni

// DRA mode (draClaimsDir): the devices of a pod are those of the DRA claims
// the node agent prepared for it. The kubelet prepares a pod's claims
// (NodePrepareResources) before it creates the sandbox, so at ADD the
// agent's records (package claimrecord) name the pod (reservedFor) and each
// claimed NIC; ADD then attaches them as standalone mode attaches the
// devices PodResources reports. docs/dra.md, "Netdevs in the pod", says
// why this and not PodResources or NRI.

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// claimedDevices returns the RDMA names, in natural order, of the devices
// of every claim reserved for the pod, leaving out admin-access results
// (they hold no device). None is an empty answer, not an error.
//
// shared names those the claim holds a share of (a shared pool of frontend
// dra: the record's shareID): other claims' pods hold the NIC too, so the
// pod gets a child of its netdev (shared.go), created in and deleted from
// its own netns only; with sharedNetdev none such a device is left out (the
// pod has its device nodes, no netdev), as a shared device plugin pool's.
func (p *Plugin) claimedDevices(conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) (ids []string, shared map[string]bool, err error) {
	if pod.UID == "" {
		return nil, nil, fmt.Errorf("%w: draClaimsDir mode needs K8S_POD_UID in CNI_ARGS", ErrBadEnvironment)
	}
	recs, damaged, err := claimrecord.ReadAll(conf.DRAClaimsDir)
	for _, d := range damaged {
		// Moved aside: it costs only its own claim (whose pod, unknown from a
		// torn file, then gets none of its devices here).
		log.Error("dra claim record does not decode; moved aside", "path", d.Path, "movedTo", d.Moved, "err", d.Err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		// The driver creates it at start: no driver, no claims to find.
		return nil, nil, fmt.Errorf("%w: DRA claims dir %s does not exist (is the node agent running with --dra, its plugin dir at this host path?): %w",
			ErrNotAvailable, conf.DRAClaimsDir, err)
	}
	if err != nil {
		return nil, nil, err
	}
	for _, r := range recs {
		if !r.ForPod(pod.UID) {
			continue
		}
		for _, d := range r.Devices {
			if d.AdminAccess {
				continue
			}
			what := fmt.Sprintf("claim %s/%s (uid %s): device %s of pool %s", r.Namespace, r.Name, r.UID, d.Device, d.Pool)
			if d.ID() == "" {
				return nil, nil, fmt.Errorf("%s: the record names no RDMA device (prepared by an older node agent?): %w", what, ErrDeviceNotFound)
			}
			dev, err := res.LookupRDMA(d.ID())
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", what, lookupError(d.ID(), err))
			}
			if !d.GetsNetdev(conf.SharedNetdev != netconf.SharedNone) {
				log.Info("sharedNetdev none: a shared device's pod gets no netdev", "claim", r.Namespace+"/"+r.Name, "device", d.Device, "rdma", dev.Name)
				continue
			}
			if d.Shared() {
				if shared == nil {
					shared = map[string]bool{}
				}
				shared[dev.Name] = true
			}
			if !slices.Contains(ids, dev.Name) {
				ids = append(ids, dev.Name)
			}
		}
		log.Info("dra claim of the pod", "claim", r.Namespace+"/"+r.Name, "uid", r.UID, "devices", len(r.Devices))
	}
	netconf.SortDevices(ids)
	return ids, shared, nil
}

// errNoClaims is ADD's answer in DRA mode, when not chained, for a pod
// that has no claim: a network the pod asked for by name (Multus) that
// gives it nothing is a mistake worth an error.
func errNoClaims(conf *netconf.Conf, pod podRef) error {
	return fmt.Errorf("no claim of DRA driver %s in %s is reserved for pod %s/%s (uid %s): %w",
		claimrecord.DriverName, conf.DRAClaimsDir, pod.Namespace, pod.Name, pod.UID, ErrNotAllocated)
}
