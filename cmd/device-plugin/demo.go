package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func demoCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sample := fs.String("sample", "hgx", "built-in sample node: "+strings.Join(nodesim.Names(), ", "))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: device-plugin demo [flags]\n\nWrites a built-in sample node's sysfs into a temporary directory and runs\ndiscovery on it. Needs no root, no cluster and no RDMA hardware.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
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
	return writeNode(stdout, node, "table")
}
