package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

type discoverConfig struct {
	sysRoot, procRoot string
	output            string
	sample            string
}

func discoverCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("discover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg discoverConfig
	fs.StringVar(&cfg.sysRoot, "sysfs-root", "/sys", "sysfs root to read")
	fs.StringVar(&cfg.procRoot, "proc-root", "/proc", "procfs root to read (NVIDIA GPU UUIDs)")
	fs.StringVar(&cfg.output, "o", "table", "output format: table or json")
	fs.StringVar(&cfg.sample, "sample", "", "scan a built-in sample node instead of this one: "+strings.Join(nodesim.Names(), ", "))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: device-plugin discover [flags]\n\nPrints the RDMA devices, GPUs and their PCIe affinity (PIX/PXB/PHB/NODE/SYS,\nas nvidia-smi topo -m names them). The JSON form is a stable contract.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("discover takes no arguments, got %q", fs.Args())
	}
	if cfg.output != "table" && cfg.output != "json" {
		return fmt.Errorf("output format %q: want table or json", cfg.output)
	}
	if cfg.sample != "" {
		tree, cleanup, err := buildSample(cfg.sample)
		if err != nil {
			return err
		}
		defer cleanup()
		cfg.sysRoot, cfg.procRoot = tree.SysRoot, tree.ProcRoot
	}
	node, err := discovery.Scanner{SysRoot: cfg.sysRoot, ProcRoot: cfg.procRoot}.Scan()
	if err != nil {
		return err
	}
	return writeNode(stdout, node, cfg.output)
}

func writeNode(w io.Writer, node *discovery.Node, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(node)
	}
	return report.WriteTable(w, node)
}

// buildSample writes a built-in sample node into a temporary directory.
func buildSample(name string) (nodesim.Tree, func(), error) {
	topo, ok := nodesim.Named(name)
	if !ok {
		return nodesim.Tree{}, nil, fmt.Errorf("unknown sample node %q: want one of %s", name, strings.Join(nodesim.Names(), ", "))
	}
	dir, err := os.MkdirTemp("", "kube-rdma-sample-")
	if err != nil {
		return nodesim.Tree{}, nil, fmt.Errorf("build sample node: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	tree, err := nodesim.Build(dir, topo)
	if err != nil {
		cleanup()
		return nodesim.Tree{}, nil, err
	}
	return tree, cleanup, nil
}
