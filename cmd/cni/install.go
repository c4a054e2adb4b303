package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

const installUsage = `usage: kube-rdma install [flags]

Install the plugin on a node from a container, without a shell (docs/cni.md,
Installing):
  --bin-dir                copy this binary into the CNI bin directory, with
                           its node file (kube-rdma.json: the host paths
                           --state-dir, --log-file, --kubelet-socket,
                           --sysfs-root, --proc-root, --alloc-dir,
                           --dra-claims-dir and --require-pod-resources,
                           which no netconf may change)
  --conf-dir ... --plugin-config FILE
                           chain FILE's plugin into the primary conflist
  --watch [--remove-on-exit]
                           keep it there until SIGTERM or SIGINT (then take it
                           out, and the binary when nothing needs it)
Every file is replaced atomically (temporary file in the same directory,
fsync, rename). Exit status 0 when done, 2 for a bad command line, 1 for
any other failure, with one line on stderr; logs go to stderr.

Flags:
`

// installCommand parses the install flags and runs the installer until it is
// done or, with --watch, until SIGTERM or SIGINT.
func installCommand(args []string, stdout, stderr io.Writer) error {
	o, err := parseInstallFlags(args, stdout, stderr)
	if err != nil {
		return err
	}
	if boot, err := attachment.ReadBootID("/proc"); err == nil {
		o.BootID = boot
	} else {
		o.Log.Warn("records of earlier boots count as attached pods", "err", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := cniinstall.Run(ctx, o); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

func parseInstallFlags(args []string, stdout, stderr io.Writer) (cniinstall.Options, error) {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	var o cniinstall.Options
	fs.StringVar(&o.BinDir, "bin-dir", "", "CNI bin directory: copy this binary (/proc/self/exe) there as kube-rdma, mode 0755; skipped when the same file is there")
	fs.StringVar(&o.ConfDir, "conf-dir", "", "CNI configuration directory holding the primary network's conflist (needs --plugin-config)")
	fs.StringVar(&o.Conflist, "conflist", "", "conflist file name in --conf-dir; empty: the first *.conflist in lexical order (the runtime's), looked up again at each change with --watch")
	fs.StringVar(&o.PluginConfig, "plugin-config", "", "JSON object to chain: type kube-rdma, no cniVersion or name (the conflist's apply); it replaces the kube-rdma entry in place or is appended as the last plugin")
	fs.StringVar(&o.StateDir, "state-dir", netconf.DefaultStateDir, "the plugin's stateDir: with --remove-on-exit and --bin-dir, the binary is kept while it holds an attachment record of this boot; empty: always kept")
	var n netconf.Node
	fs.StringVar(&n.LogFile, "log-file", "", "node file: the plugin's log file (appended to); empty: none")
	fs.StringVar(&n.KubeletSocket, "kubelet-socket", netconf.DefaultKubeletSocket, "node file: the kubelet's PodResources socket")
	fs.StringVar(&n.SysfsRoot, "sysfs-root", netconf.DefaultSysfsRoot, "node file: where sysfs is")
	fs.StringVar(&n.ProcRoot, "proc-root", netconf.DefaultProcRoot, "node file: where procfs is (NVIDIA GPU files)")
	fs.StringVar(&n.AllocDir, "alloc-dir", netconf.DefaultAllocDir, "node file: the device plugin's --alloc-dir (gpuAligned pools)")
	fs.StringVar(&n.DRAClaimsDir, "dra-claims-dir", netconf.DefaultDRAClaimsDir, "node file: the DRA driver's claim records directory")
	require := fs.Bool("require-pod-resources", true, "node file: refuse a deviceID the kubelet cannot confirm for the pod (a netconf cannot turn this off)")
	fs.BoolVar(&o.Watch, "watch", false, "keep the entry in the conflist (inotify on --conf-dir) until SIGTERM or SIGINT, then exit 0")
	fs.BoolVar(&o.RemoveOnExit, "remove-on-exit", false, "with --watch: on SIGTERM or SIGINT take the entry out of the conflist; with --bin-dir also remove the binary and its node file unless a file in --conf-dir names kube-rdma or --state-dir holds a record (the chart does not pass it: `kube-rdma uninstall` is its uninstall)")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "without --watch: how long to wait for the conflist before failing")
	format := fs.String("log-format", "json", "json or text")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), installUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return o, err
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(strings.ToUpper(*level))); err != nil {
		return o, cli.Usagef("install: --log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: lv}
	switch *format {
	case "json":
		o.Log = slog.New(slog.NewJSONHandler(stderr, hopts))
	case "text":
		o.Log = slog.New(slog.NewTextHandler(stderr, hopts))
	default:
		return o, cli.Usagef("install: --log-format %q: want json or text", *format)
	}
	n.StateDir, n.RequirePodResources = o.StateDir, require
	if o.BinDir != "" {
		if _, err := netconf.ParseNode(mustMarshal(n)); err != nil {
			return o, cli.Usagef("install: %w", err)
		}
		o.Node = &n
	}
	o.Versions = cni.Versions.SupportedVersions()
	if err := o.Validate(); err != nil {
		fs.Usage()
		return o, cli.Usagef("install: %w", err)
	}
	return o, nil
}

// mustMarshal encodes a node file; a Node always encodes.
func mustMarshal(n netconf.Node) []byte {
	b, _ := n.Marshal()
	return b
}
