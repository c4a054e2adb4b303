package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/cnireclaim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// reclaimFlags are the `run` flags of the reclaimer of CNI attachments
// whose DEL never came (pkg/cnireclaim).
type reclaimFlags struct {
	stateDir string
	binDir   string
	interval time.Duration
}

func (f *reclaimFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.stateDir, "cni-reclaim-state-dir", "", "the kube-rdma CNI plugin's state directory, read-write: reclaim the attachments whose DEL never came "+
		"(pod netns gone and pod unknown to the kubelet, or NICs the kernel gave back) every --cni-reclaim-interval: devices back on the host, "+
		"IPAM released, record removed, by the installed plugin's `kube-rdma reclaim` in --cni-bin-dir; needs CAP_NET_ADMIN (the chart: cni.install and cni.reclaim.enabled); empty: off")
	fs.StringVar(&f.binDir, "cni-bin-dir", "/opt/cni/bin", "the node's CNI bin directory, read only: where the installed kube-rdma plugin (whose `reclaim` the reclaimer runs, --cni-reclaim-state-dir) and the IPAM plugins are, and where `kube-rdma uninstall` leaves its marker, on which the daemon removes --pools-file and writes it no more")
	fs.DurationVar(&f.interval, "cni-reclaim-interval", cnireclaim.DefaultInterval, "time between two reclaim passes, for --cni-reclaim-state-dir")
}

// parse checks the flags: a usage error (exit 2) when wrong.
func (f *reclaimFlags) parse() error {
	if f.stateDir == "" {
		return nil
	}
	if f.interval <= 0 {
		return cli.Usagef("run: --cni-reclaim-interval %s must be positive", f.interval)
	}
	if f.binDir == "" {
		return cli.Usagef("run: --cni-reclaim-state-dir needs --cni-bin-dir")
	}
	return nil
}

// reclaimNotBackWait bounds a pass's wait for a NIC the kernel has not
// returned yet (without the plugin's node-wide lock): the next pass looks
// again, until the plugin's NetdevGiveUp.
const reclaimNotBackWait = 500 * time.Millisecond

// startReclaim starts the reclaimer with --cni-reclaim-state-dir and
// returns a function that waits for it to stop after ctx ends. Its metric
// is on the daemon's /metrics. It asks the kubelet through cfg.Allocations
// (--pod-resources-socket); without it, a record waits for the grace period.
func startReclaim(ctx context.Context, cfg runConfig, d *agent.Agent) (wait func(), err error) {
	f := cfg.reclaim
	if f.stateDir == "" {
		return func() {}, nil
	}
	boot, err := attachment.ReadBootID(cfg.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("run: --cni-reclaim-state-dir: %w", err)
	}
	log := cfg.Logger.With("component", "cni-reclaim")
	p, err := cni.NewReclaimer(log, boot, reclaimNotBackWait, f.stateDir)
	if err != nil {
		return nil, fmt.Errorf("run: --cni-reclaim-state-dir: %w", err)
	}
	// The restore is the installed plugin's (kube-rdma reclaim), the release
	// that wrote the records; the linked plugin only judges whether the
	// kernel returned a record's NICs.
	restorer := cnireclaim.ExecRestorer{Binary: filepath.Join(f.binDir, cniinstall.BinaryName), ReturnWait: reclaimNotBackWait,
		Stderr: os.Stderr, Checker: p}
	c := cnireclaim.Config{Restorer: restorer, Opts: cni.ReclaimOpts{Store: attachment.Store{Dir: f.stateDir, BootID: boot}, CNIPath: f.binDir, SysfsRoot: cfg.SysRoot},
		Interval: f.interval, Namespace: agent.MetricsNamespace, Logger: log}
	if cfg.Allocations != nil {
		c.Pods = cfg.Allocations
	}
	r := cnireclaim.New(c)
	if err := d.RegisterCollector(r); err != nil {
		_ = p.HostNS.Close()
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = p.HostNS.Close() }()
		_ = r.Run(ctx)
	}()
	return func() { <-done }, nil
}
