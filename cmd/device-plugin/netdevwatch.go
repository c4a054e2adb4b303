package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/netdevwatch"
)

// netdevWatchFlags are the `run` flags of the detector of pods without
// their netdevs (pkg/netdevwatch) and of the NRI plugin's refusal.
type netdevWatchFlags struct {
	interval, grace time.Duration
	nriFailClosed   bool
}

func (f *netdevWatchFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.interval, "netdev-check-interval", netdevwatch.DefaultInterval, "how often pods holding devices of a pool whose pods get netdevs (--cni-chained-pool, of the device plugin or, with --dra, of DRA claims; gpuAligned pools) are checked for their attachment records (Event "+netdevwatch.EventReason+", kube_rdma_pods_missing_netdev, status.podsWithoutNetdevs)")
	fs.DurationVar(&f.grace, "netdev-check-grace", netdevwatch.DefaultGrace, "how long after a pod's sandbox is ready its attachment may be missing before it is flagged")
	fs.BoolVar(&f.nriFailClosed, "nri-fail-closed", true, "refuse to create a container that holds devices of a pool whose pods get netdevs when its pod sandbox has no complete attachment of them: with --nri the NRI plugin refuses it, and with --memlock-hook-dir the netdev hook on the chained pool's CDI devices does, whether or not NRI is on (docs/device-plugin.md, \"Fail closed\")")
}

// claimRecords lists the DRA front end's claim records for the detector
// and the NRI plugin (fail closed on the chained pool of frontend dra). A
// record that does not decode is moved aside by claimrecord.ReadAll and
// logged; a directory not there yet (the driver creates it at start) holds
// no claim.
type claimRecords struct {
	dir string
	log *slog.Logger
}

func (c claimRecords) Claims() ([]claimrecord.Record, error) {
	recs, damaged, err := claimrecord.ReadAll(c.dir)
	for _, d := range damaged {
		c.log.Error("dra claim record does not decode; moved aside", "path", d.Path, "movedTo", d.Moved, "err", d.Err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return recs, err
}

// draClaims is the claim records of --dra-plugin-dir; ok false without --dra.
func draClaims(cfg runConfig) (c claimRecords, ok bool) {
	if !cfg.dra.enabled {
		return claimRecords{}, false
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return claimRecords{dir: dra.ClaimsDir(cfg.dra.pluginDir), log: log}, true
}

// failClosedHook is what the chained pool's CDI devices' netdev hook
// checks: with --nri-fail-closed, the memlock hook installed (the same
// binary) and a chained pool. The hook runs on the host and reads
// --cni-state-dir there: the chart mounts the directory at its host path.
func failClosedHook(cfg runConfig) *deviceplugin.FailClosed {
	if !cfg.netdevWatch.nriFailClosed || cfg.plugin.MemlockHook == "" || cfg.nodeState.cniPool == "" {
		return nil
	}
	return &deviceplugin.FailClosed{StateDir: cfg.nodeState.cniState,
		Chain: netdevcheck.Chain{Pool: cfg.nodeState.cniPool, SharedNetdev: cfg.nodeState.sharedNetdev()}}
}

// draFailClosed is failClosedHook for the DRA front end's claims: their
// devices of the chained pool, when it is a dra pool.
func draFailClosed(cfg runConfig) *dra.FailClosed {
	fc := failClosedHook(cfg)
	if fc == nil {
		return nil
	}
	return &dra.FailClosed{StateDir: fc.StateDir, Pool: fc.Chain.Pool, SharedNetdev: fc.Chain.SharedNetdev}
}

// attachmentStore is the CNI plugin's state directory (--cni-state-dir),
// read only; ok false when it is not read.
func attachmentStore(cfg runConfig) (s attachment.Store, ok bool, err error) {
	dir := cfg.nodeState.cniState
	if dir == "" {
		return attachment.Store{}, false, nil
	}
	// The kernel's boot ID, as the node-state publisher reads it: the
	// same in every mount namespace.
	boot, err := attachment.ReadBootID("/proc")
	if err != nil {
		return attachment.Store{}, false, fmt.Errorf("run: --cni-state-dir: %w", err)
	}
	return attachment.Store{Dir: dir, BootID: boot}, true, nil
}

// startNetdevWatch starts the detector once the daemon is ready, with the
// kubelet's PodResources and the CNI plugin's records (it needs both; nil
// otherwise), and the API server when there is one (Events, the pods'
// sandbox times). The returned function waits for it to stop.
func startNetdevWatch(ctx context.Context, cfg runConfig, a apiConn, d *agent.Agent) (det *netdevwatch.Detector, wait func(), err error) {
	if cfg.netdevWatch.interval <= 0 || cfg.netdevWatch.grace <= 0 {
		return nil, nil, fmt.Errorf("run: --netdev-check-interval %s and --netdev-check-grace %s must be positive", cfg.netdevWatch.interval, cfg.netdevWatch.grace)
	}
	store, ok, err := attachmentStore(cfg)
	if err != nil || !ok || cfg.Allocations == nil {
		return nil, func() {}, err
	}
	c := netdevwatch.Config{Source: d, Pods: cfg.Allocations, Records: store, ChainedPool: cfg.nodeState.cniPool, SharedNetdev: cfg.nodeState.sharedNetdev(),
		Interval: cfg.netdevWatch.interval, Grace: cfg.netdevWatch.grace, Logger: cfg.Logger}
	if cr, ok := draClaims(cfg); ok {
		c.Claims = cr
	}
	stop := func() {}
	if a.err == nil {
		k := netdevwatch.NewKube(a.clients.kube, cfg.NodeName)
		c.PodInfo, c.Finder, c.Events, stop = k, k, k, k.Stop
	}
	det = netdevwatch.New(c)
	if err := d.RegisterCollector(det); err != nil {
		stop()
		return nil, nil, err
	}
	w := runWhenReady(ctx, d, det.Run)
	return det, func() { w(); stop() }, nil
}
