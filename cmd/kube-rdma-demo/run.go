package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	dpdemo "github.com/kube-rdma/kube-rdma/pkg/deviceplugin/demo"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	sample := fs.String("sample", "hgx", "built-in sample node: "+strings.Join(nodesim.Names(), ", "))
	config := fs.String("config", "", "device plugin pools file (YAML or JSON); empty for the built-in default")
	hold := fs.Bool("hold", false, "keep the daemon and the kubelet stand-in running after the script (Ctrl-C to stop)")
	metrics := fs.String("metrics-addr", "127.0.0.1:9478", "with --hold: address for /metrics and /state")
	verbose := fs.Bool("v", false, "show the daemon's and the kubelet stand-in's logs")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kube-rdma-demo [run] [flags]\n\nWrites a built-in sample node's sysfs into a temporary directory, runs\ndiscovery on it, then runs the device plugin daemon on it against an\nin-process kubelet stand-in: registration, ListAndWatch, preferred\nallocation, Allocate, a port going down and back, a kubelet restart.\nNeeds no root, no cluster and no RDMA hardware.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	tree, cleanup, err := buildSample(*sample)
	if err != nil {
		return err
	}
	defer cleanup()
	fmt.Fprintf(stdout, "== Sample node %q written to %s\n\n", *sample, tree.Root)
	node, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "== Discovery: %d RDMA devices, %d GPUs\n\n", len(node.RDMADevices), len(node.GPUs))
	if err := report.WriteTable(stdout, node); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n== Device plugin daemon against a kubelet stand-in\n\n")
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	return dpdemo.Run(ctx, dpdemo.Options{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, ConfigFile: *config,
		Out: stdout, Log: log, Hold: *hold, MetricsAddr: *metrics})
}
