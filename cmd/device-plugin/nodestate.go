package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/internal/version"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/netdevwatch"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
)

// nodeStateFlags are the `run` flags of the RDMANodeState publisher.
type nodeStateFlags struct {
	enabled   bool
	set       bool // --node-state was given
	interval  time.Duration
	refresh   time.Duration
	podSocket string
	cniState  string
	cniMode   string
	cniPool   string
	// cniSharedNetdev: the chained entry's sharedNetdev (--cni-shared-netdev).
	cniSharedNetdev string
}

// sharedNetdev reports whether the chained entry gives pods of shared
// pools child netdevs (sharedNetdev macvlan or ipvlan).
func (f *nodeStateFlags) sharedNetdev() bool {
	return f.cniSharedNetdev != string(netconf.SharedNone)
}

// parse checks --cni-shared-netdev.
func (f *nodeStateFlags) parse() error {
	switch netconf.SharedNetdev(f.cniSharedNetdev) {
	case netconf.SharedMacvlan, netconf.SharedIPVLAN, netconf.SharedNone:
		return nil
	}
	return cli.Usagef("run: --cni-shared-netdev %q is not macvlan, ipvlan or none", f.cniSharedNetdev)
}

func (f *nodeStateFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "node-state", false, "publish this node's RDMANodeState (default: true in a cluster, i.e. with an in-cluster config, or with --kubeconfig)")
	fs.DurationVar(&f.interval, "node-state-interval", nodestate.DefaultInterval, "least time between two RDMANodeState writes (changes in between are coalesced)")
	fs.DurationVar(&f.refresh, "node-state-refresh", nodestate.DefaultRefresh, "write the RDMANodeState again, unchanged but for status.lastUpdate, when its last write is this old, so that its age says the daemon is alive (kubectl rdma doctor warns past --stale-after, 10m); 0: never")
	fs.StringVar(&f.podSocket, "pod-resources-socket", "/var/lib/kubelet/pod-resources/kubelet.sock", "the kubelet's PodResources socket (allocations in RDMANodeState; removing gpuAligned allocation directories no container holds)")
	fs.StringVar(&f.cniMode, "cni-mode", "", "how the chart set up the kube-rdma CNI plugin on the node (chained, multus, none, not-installed), published as status.cni; empty: not published")
	fs.StringVar(&f.cniPool, "cni-chained-pool", "", "with --cni-mode=chained: the pool whose devices the chained entry attaches (the chart's cni.chained.pool), published as status.cni.chainedPool")
	fs.StringVar(&f.cniSharedNetdev, "cni-shared-netdev", string(netconf.DefaultSharedNetdev), "with --cni-chained-pool: the chained entry's sharedNetdev (the chart's cni.pluginConfig.sharedNetdev): macvlan or ipvlan, pods of shared pools (and shared DRA claims) get a child netdev of each NIC and are checked for it; none, the plugin's default, they get device nodes only and are not")
	fs.StringVar(&f.cniState, "cni-state-dir", "/var/lib/cni/kube-rdma", "the kube-rdma CNI plugin's state directory, read only: the names of the pods' devices in the pods (allocations' attached devices), and the devices in pods' network namespaces, kept in their pools while the daemon cannot see them; empty: not read")
}

// wanted reports whether the publisher may run: not --node-state=false.
func (f *nodeStateFlags) wanted() bool { return !f.set || f.enabled }

// off says why the daemon does not publish, or returns the error that stops
// it: --node-state=false; not given, and not in a cluster (no in-cluster
// config, no --kubeconfig); asked for without an API server.
func (f *nodeStateFlags) off(a apiConn) (reason string, err error) {
	switch {
	case !f.wanted():
		return "--node-state=false", nil
	case a.err == nil:
		return "", nil
	case !f.set && errors.Is(a.err, rest.ErrNotInCluster):
		return "not in a cluster (no in-cluster config, no --kubeconfig)", nil
	}
	return "", fmt.Errorf("run: --node-state: %w", a.err)
}

// startNodeState starts the publisher once the daemon is ready (its first
// scan done, every pool served) and returns a function that waits for it to
// stop after ctx ends. Without an API server it only says so on /state.
func startNodeState(ctx context.Context, cfg runConfig, a apiConn, d *agent.Agent, det *netdevwatch.Detector, giveUps nodestate.GiveUps) (wait func(), err error) {
	reason, err := cfg.nodeState.off(a)
	if err != nil {
		return nil, err
	}
	if reason != "" {
		d.SetNodeStateReport(func() any { return nodestate.Report{Reason: reason} })
		return func() {}, nil
	}
	if !cfg.nodeNameSet {
		return nil, errors.New("run: publishing RDMANodeState needs the node's name: --node-name or NODE_NAME (the chart sets it from spec.nodeName)")
	}
	switch cfg.nodeState.cniMode {
	case "", "chained", "multus", "none", "not-installed":
	default:
		return nil, fmt.Errorf("run: --cni-mode %q: want chained, multus, none or not-installed", cfg.nodeState.cniMode)
	}
	if cfg.nodeState.cniPool != "" && cfg.nodeState.cniMode != "chained" {
		return nil, fmt.Errorf("run: --cni-chained-pool %q needs --cni-mode=chained", cfg.nodeState.cniPool)
	}
	if cfg.nodeState.interval <= 0 {
		return nil, fmt.Errorf("run: --node-state-interval %s must be positive", cfg.nodeState.interval)
	}
	refresh := cfg.nodeState.refresh
	switch {
	case refresh < 0:
		return nil, fmt.Errorf("run: --node-state-refresh %s: want a duration >= 0 (0: never)", refresh)
	case refresh == 0:
		refresh = -1 // nodestate.Config: negative is never
	}
	client := nodestate.NewClient(a.clients.kube.CoreV1(), a.clients.rdma.RDMAV1alpha1())
	var records nodestate.RecordLister
	if dir := cfg.nodeState.cniState; dir != "" {
		boot, err := attachment.ReadBootID("/proc")
		if err != nil {
			return nil, fmt.Errorf("run: --cni-state-dir: %w", err)
		}
		records = attachment.Store{Dir: dir, BootID: boot}
	}
	var missing nodestate.MissingNetdevs
	if det != nil {
		missing = det
	}
	var claims nodestate.ClaimLister
	if c, ok := draClaims(cfg); ok {
		claims = c // --dra: the claim records of --dra-plugin-dir
	}
	p := nodestate.New(nodestate.Config{NodeName: cfg.NodeName, Source: d, Pods: cfg.Allocations, Records: records, Missing: missing, Claims: claims, GiveUps: giveUps, CNIMode: cfg.nodeState.cniMode, CNIChainedPool: cfg.nodeState.cniPool, Writer: client,
		DaemonVersion: version.Get().Version, Interval: cfg.nodeState.interval, Refresh: refresh, Logger: cfg.Logger})
	if err := d.RegisterCollector(p); err != nil {
		return nil, err
	}
	d.SetNodeStateReport(func() any { return p.Report() })
	return runWhenReady(ctx, d, p.Run), nil
}
