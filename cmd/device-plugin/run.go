package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/devinfo"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
)

// podResourcesTimeout bounds each call to the kubelet's PodResources API;
// the sweeper and the publisher also bound their own.
const podResourcesTimeout = 10 * time.Second

// runCommand parses the `run` flags and runs the device plugin until ctx ends
// (SIGTERM/SIGINT in main), when it removes its sockets.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseRunFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	if cfg.nodeState.podSocket != "" {
		// One connection serves the sweeper of gpuAligned allocation
		// directories and the node-state publisher.
		c, err := grpcclient.Dial(cfg.nodeState.podSocket, podResourcesTimeout)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		cfg.Allocations = c
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := connect(cfg.kubeconfig, cfg.dra.enabled || cfg.nodeState.wanted() || cfg.statusAuth.required(cfg.MetricsAddr))
	if err := setStatusAuth(&cfg, a); err != nil {
		return err
	}
	// Before the front ends: the pools' and claims' CDI specs name the hook.
	if cfg.plugin.MemlockHook, err = installMemlockHook(cfg.hookDir, cfg.hookBinary); err != nil {
		return err
	}
	cfg.plugin.FailClosed = failClosedHook(cfg)
	drv, err := startDRA(ctx, cfg, a)
	if err != nil {
		return err
	}
	if drv != nil {
		defer drv.Stop() // when the agent does not run; it stops its front ends itself
	}
	cfg.NetnsMode = e2eNetnsMode()
	d, dp, err := newAgent(cfg, drv)
	if err != nil {
		return err
	}
	stopProbe, err := listenProbe(cfg.probeSocket, d, dp)
	if err != nil {
		return err
	}
	defer stopProbe()
	det, waitDet, err := startNetdevWatch(ctx, cfg, a, d)
	if err != nil {
		return err
	}
	defer waitDet()
	waitClaimStatus, err := startClaimStatus(ctx, cfg, a, d)
	if err != nil {
		return err
	}
	defer waitClaimStatus()
	giveUps, waitCNIMetrics, err := startCNIMetrics(ctx, cfg, a, d)
	if err != nil {
		return err
	}
	defer waitCNIMetrics()
	wait, err := startNodeState(ctx, cfg, a, d, det, giveUps)
	if err != nil {
		return err
	}
	defer wait()
	waitNRI, err := startNRI(ctx, cfg, d)
	if err != nil {
		return err
	}
	defer waitNRI()
	waitReclaim, err := startReclaim(ctx, cfg, d)
	if err != nil {
		return err
	}
	defer waitReclaim()
	defer startConfigEvents(ctx, cfg, a, d)()
	defer runWhenReady(ctx, d, pageOutWhenSettled(cfg.Logger))()
	defer cancel() // runs first: the spool's drain, the publisher, the detector, the claim status writer, the NRI plugin, the reclaimer and the config Events stop before the waits
	return d.Run(ctx)
}

// newAgent builds the device plugin front end and the agent that drives it
// and, with --dra, the DRA driver; with --cni-state-dir the agent keeps the
// devices the CNI plugin's records lend to pods in their pools.
func newAgent(cfg runConfig, drv *dra.Driver) (*agent.Agent, *deviceplugin.Plugin, error) {
	dp, err := deviceplugin.New(cfg.plugin)
	if err != nil {
		return nil, nil, err
	}
	c := cfg.Config
	c.FrontEnds = map[config.Frontend]agent.FrontEnd{config.DevicePlugin: dp}
	c.QuarantineDirs = map[string]string{}
	if dir := cfg.nodeState.cniState; dir != "" {
		c.QuarantineDirs["attachment"] = filepath.Join(dir, attachment.QuarantineDir)
	}
	store, ok, err := attachmentStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	if ok {
		c.Lent = lentDevices{store: store}
		if c.PoolsFile != "" {
			// Beside the pools file: on the host's tmpfs (nothing is lent after a
			// reboot) and removed with it by uninstall.
			c.LentFile = nodepools.LentPath(c.PoolsFile)
		}
	}
	if cfg.dra.enabled {
		c.QuarantineDirs["claim"] = filepath.Join(dra.ClaimsDir(cfg.dra.pluginDir), claimrecord.QuarantineDir)
	}
	if drv != nil {
		c.FrontEnds[config.DRA] = drv
	}
	a, err := agent.New(c)
	return a, dp, err
}

// runConfig is the agent's config, its device plugin front end's, and the
// flags of the DRA driver, the node-state publisher, the NRI plugin and the
// CNI attachments' reclaimer.
type runConfig struct {
	agent.Config
	plugin      deviceplugin.Config
	nodeNameSet bool // from --node-name or NODE_NAME, not the hostname
	probeSocket string
	kubeconfig  string
	nodeState   nodeStateFlags
	nri         nriFlags
	netdevWatch netdevWatchFlags
	dra         draFlags
	statusAuth  statusAuthFlags
	reclaim     reclaimFlags
	cniMetrics  cniMetricsFlags
	hookDir     string
	hookBinary  string
}

func parseRunFlags(args []string, stdout, stderr io.Writer) (runConfig, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var cfg runConfig
	fs.StringVar(&cfg.ConfigFile, "config", "", "pools file (YAML or JSON), reloaded on change; empty: one exclusive pool \"hca\" with every RDMA device, prefix rdma.kube-rdma.io")
	fs.StringVar(&cfg.plugin.KubeletDir, "kubelet-dir", "/var/lib/kubelet/device-plugins", "kubelet device plugin directory (holds kubelet.sock)")
	fs.StringVar(&cfg.SysRoot, "sysfs-root", "/sys", "sysfs root")
	fs.StringVar(&cfg.ProcRoot, "proc-root", "/proc", "procfs root")
	fs.StringVar(&cfg.plugin.DevRoot, "dev-root", "/dev", "where the host's /dev is visible to the daemon (read only; responses name /dev paths)")
	fs.StringVar(&cfg.plugin.CDIDir, "cdi-dir", "/var/run/cdi", "directory for CDI specs; empty disables CDI")
	fs.StringVar(&cfg.hookDir, "memlock-hook-dir", "", "host directory (seen by the daemon at the same path) where the daemon installs the kube-rdma binary that each pool's CDI spec runs as a createRuntime hook: every container given a pool's devices gets the pool's memlock, with or without NRI (docs/device-plugin.md, Locked memory); needs --cdi-dir; empty: no hook")
	fs.StringVar(&cfg.hookBinary, "memlock-hook-binary", "", "the kube-rdma binary to install in --memlock-hook-dir; empty: kube-rdma beside this executable (the image's /usr/local/bin/kube-rdma)")
	fs.StringVar(&cfg.plugin.DeviceInfoDir, "device-info-dir", "", "directory of the NPWG device-info files of allocated devices, which Multus reads (the host's "+devinfo.DefaultDPDir+", seen by the daemon at the same path); empty writes none")
	fs.StringVar(&cfg.AllocDir, "alloc-dir", allocdir.DefaultRoot, "host directory of gpuAligned pools (pool files, allocation directories), seen at the same path by the daemon; empty refuses gpuAligned pools")
	fs.StringVar(&cfg.PoolsFile, "pools-file", nodepools.Path(allocdir.DefaultRoot), "the node's pools file (the served pools' devices), read by the CNI plugin at <its node file's allocDir>/"+nodepools.FileName+"; empty writes none")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "127.0.0.1:9478", "address of /metrics, /state and /healthz (the loopback by default; elsewhere /metrics and /state need a token, --metrics-auth); empty disables")
	fs.StringVar(&cfg.NodeName, "node-name", "", "node name for logs and /state (default $NODE_NAME, else the hostname)")
	fs.DurationVar(&cfg.HealthInterval, "health-interval", agent.DefaultHealthInterval, "how often port state and device presence are re-read")
	fs.StringVar(&cfg.kubeconfig, "kubeconfig", "", kubeconfigHelp)
	fs.StringVar(&cfg.probeSocket, "probe-socket", "", "unix socket answering device-plugin probe, in a directory of this pod alone (the chart: "+defaultProbeSocket+" in an emptyDir); empty disables")
	cfg.nodeState.register(fs)
	cfg.nri.register(fs)
	cfg.netdevWatch.register(fs)
	cfg.dra.register(fs)
	cfg.statusAuth.register(fs)
	cfg.reclaim.register(fs)
	cfg.cniMetrics.register(fs)
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: device-plugin run [flags]\n\nAdvertise RDMA devices to the kubelet as extended resources.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return cfg, err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(*level))); err != nil {
		return cfg, cli.Usagef("run: --log-level: %w", err)
	}
	if err := cfg.statusAuth.parse(); err != nil {
		return cfg, err
	}
	if err := cfg.reclaim.parse(); err != nil {
		return cfg, err
	}
	if err := cfg.nodeState.parse(); err != nil {
		return cfg, err
	}
	if cfg.HealthInterval <= 0 || cfg.HealthInterval > time.Second {
		return cfg, cli.Usagef("run: --health-interval %s must be in (0, 1s]", cfg.HealthInterval)
	}
	fs.Visit(func(f *flag.Flag) { cfg.nodeState.set = cfg.nodeState.set || f.Name == "node-state" })
	cfg.nodeNameSet = cfg.NodeName != "" || os.Getenv("NODE_NAME") != ""
	if cfg.NodeName == "" {
		hostname, _ := os.Hostname()
		cfg.NodeName = envOr("NODE_NAME", hostname)
	}
	cfg.Logger = newLogger(stderr, lv)
	cfg.plugin.AllocDir, cfg.plugin.Logger = cfg.AllocDir, cfg.Logger
	cfg.Uninstalling = uninstalling(cfg.reclaim.binDir)
	if cfg.hookDir != "" && cfg.plugin.CDIDir == "" {
		return cfg, cli.Usagef("run: --memlock-hook-dir needs --cdi-dir: the hook is in the pools' CDI specs")
	}
	return cfg, nil
}

// uninstalling reports whether the chart is being uninstalled: the
// uninstall marker `kube-rdma uninstall` writes in the CNI bin directory
// (pkg/cniinstall). The agent then removes the pools file and writes it no
// more (agent.Config.Uninstalling). Nil without a bin directory; a marker
// that cannot be looked for is no marker.
func uninstalling(binDir string) func() bool {
	if binDir == "" {
		return nil
	}
	return func() bool {
		u, err := cniinstall.Uninstalling(binDir)
		return err == nil && u
	}
}

// newLogger logs JSON lines, durations as "500ms" rather than the JSON
// handler's nanoseconds.
func newLogger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindDuration {
				a.Value = slog.StringValue(a.Value.Duration().String())
			}
			return a
		}}))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// runWhenReady runs run(ctx) in a goroutine once the daemon is ready (its
// first scan done, every pool served), or never if ctx ends first, and
// returns a function that waits for it to return. Its error is the
// component's own to report (on /state and in the log).
func runWhenReady(ctx context.Context, d *agent.Agent, run func(context.Context) error) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-d.Ready():
			_ = run(ctx)
		case <-ctx.Done():
		}
	}()
	return func() { <-done }
}
