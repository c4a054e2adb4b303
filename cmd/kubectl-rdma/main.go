// Command kubectl-rdma is the kubectl plugin for kube-rdma (`kubectl rdma`).
// Today it renders a node's discovery report; reading the node-state custom
// resource from the API server comes with that resource.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

const usage = `usage: kubectl rdma <command> [flags]

Commands:
  topo   show RDMA devices, GPUs and the GPU x NIC PCIe matrix from a
         discovery report (device-plugin discover -o json)

Example:
  device-plugin discover -o json > node.json
  kubectl rdma topo -f node.json
`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "kubectl-rdma:", err)
			os.Exit(1)
		}
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch args[0] {
	case "topo":
		return topo(args[1:], stdin, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func topo(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "-", "discovery report (JSON) to read; - for standard input")
	if err := fs.Parse(args); err != nil {
		return err
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return fmt.Errorf("read discovery report: %w", err)
		}
		defer f.Close()
		in = f
	}
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	var n discovery.Node
	if err := dec.Decode(&n); err != nil {
		return fmt.Errorf("read discovery report %s: %w", *file, err)
	}
	if n.RDMADevices == nil && n.GPUs == nil {
		return fmt.Errorf("read discovery report %s: no rdmaDevices or gpus: not a discovery report", *file)
	}
	return report.WriteTable(stdout, &n)
}
