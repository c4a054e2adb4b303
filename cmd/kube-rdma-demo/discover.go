package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

func discoverCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("discover", flag.ContinueOnError)
	sample := fs.String("sample", "hgx", "built-in sample node: "+strings.Join(nodesim.Names(), ", "))
	output := fs.String("o", "table", "output format: "+strings.Join(report.Formats, " or "))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kube-rdma-demo discover [flags]\n\nWrites a built-in sample node's sysfs into a temporary directory and prints\nwhat discovery sees there, as device-plugin discover does on a real node.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if !slices.Contains(report.Formats, *output) {
		return cli.Usagef("discover: output format %q: want %s", *output, strings.Join(report.Formats, " or "))
	}
	tree, cleanup, err := buildSample(*sample)
	if err != nil {
		return err
	}
	defer cleanup()
	node, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		return err
	}
	return report.Write(stdout, node, *output)
}

// buildSample writes a built-in sample node into a temporary directory.
func buildSample(name string) (nodesim.Tree, func(), error) {
	topo, ok := nodesim.Named(name)
	if !ok {
		return nodesim.Tree{}, nil, cli.Usagef("unknown sample node %q: want one of %s", name, strings.Join(nodesim.Names(), ", "))
	}
	dir, err := os.MkdirTemp("", "kube-rdma-sample-")
	if err != nil {
		return nodesim.Tree{}, nil, fmt.Errorf("build sample node: %w", err)
	}
	cleanup := func() { _ = os.RemoveAll(dir) }
	tree, err := nodesim.Build(dir, topo)
	if err != nil {
		cleanup()
		return nodesim.Tree{}, nil, fmt.Errorf("build sample node %q: %w", name, err)
	}
	return tree, cleanup, nil
}
