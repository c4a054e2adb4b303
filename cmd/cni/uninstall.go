package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

const uninstallUsage = `usage: kube-rdma uninstall [flags]

Undo 'kube-rdma install' on a node (docs/cni.md, Installing); the chart's
pre-delete hook runs it on every node before the DaemonSet goes:
  1. write the uninstall marker (kube-rdma.uninstall in --bin-dir): a
     watching 'install --watch' then keeps the entry and the binary out
     instead of putting them back, until its pod is replaced;
  2. take the kube-rdma entry out of every *.conflist in --conf-dir;
  3. remove the node agent's pools file (--pools-file), which the agent,
     seeing the marker, removes too and writes no more;
  4. remove the binary and its node file from --bin-dir, unless a network
     configuration still names kube-rdma or --state-dir holds an attachment
     record of this boot (a pod's DEL needs them).
With --hold it then waits for SIGTERM or SIGINT, waits --linger more and
removes the marker before it exits: helm deletes the hook's pods and the
agent's DaemonSet in one teardown, and an agent still running after the
marker went (it had not looked for it while the hook ran) would write the
pools file again; the linger lets the agent's SIGTERM come first. A DaemonSet restart or upgrade never runs this: the entry
and the binary stay across them. Exit status 0 when done, 2 for a bad
command line, 1 for any other failure; logs go to stderr.

Flags:
`

func uninstallCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	var o cniinstall.Options
	fs.StringVar(&o.BinDir, "bin-dir", "", "CNI bin directory: the marker goes here; the binary and its node file are removed from here")
	fs.StringVar(&o.ConfDir, "conf-dir", "", "CNI configuration directory: the kube-rdma entry is taken out of each *.conflist here")
	fs.StringVar(&o.StateDir, "state-dir", netconf.DefaultStateDir, "the plugin's stateDir: the binary is kept while it holds an attachment record of this boot; empty: always kept")
	fs.StringVar(&o.PoolsFile, "pools-file", "", "the node agent's pools file (<its alloc dir>/"+nodepools.FileName+"), removed; empty: left")
	hold := fs.Bool("hold", false, "after uninstalling, wait for SIGTERM or SIGINT, then --linger, then remove the marker and exit 0")
	linger := fs.Duration("linger", 5*time.Second, "with --hold: how long the marker outlives the SIGTERM, so that the agent's pods, stopped in the same teardown, go first (keep it under the pod's terminationGracePeriodSeconds)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), uninstallUsage)
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("uninstall: unexpected argument %q", fs.Arg(0))
	}
	if o.BinDir == "" && o.ConfDir == "" {
		fs.Usage()
		return cli.Usagef("uninstall: give --bin-dir, --conf-dir, or both")
	}
	if *linger < 0 {
		return cli.Usagef("uninstall: --linger %s: want 0 or more", *linger)
	}
	if *hold && o.BinDir == "" {
		return cli.Usagef("uninstall: --hold needs --bin-dir (the marker it removes)")
	}
	o.Log = slog.New(slog.NewJSONHandler(stderr, nil))
	if boot, err := attachment.ReadBootID("/proc"); err == nil {
		o.BootID = boot
	} else {
		o.Log.Warn("records of earlier boots count as attached pods", "err", err)
	}
	// Signals before the work: a SIGTERM during it still ends the hold.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := cniinstall.Uninstall(o); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	o.Log.Info("uninstalled", "binDir", o.BinDir, "confDir", o.ConfDir)
	if !*hold {
		return nil
	}
	<-ctx.Done()
	time.Sleep(*linger)
	if _, err := cniinstall.ClearUninstall(o.BinDir); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	o.Log.Info("uninstall marker removed", "binDir", o.BinDir)
	return nil
}
