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
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

const usage = `usage: kubectl rdma <command> [flags]

Commands:
  topo     show RDMA devices, GPUs and the GPU x NIC PCIe matrix from a
           discovery report (device-plugin discover -o json)
  version  print the version, commit and build date
  help     print this help

Example:
  device-plugin discover -o json > node.json
  kubectl rdma topo -f node.json
`

// errTerminal says topo was started to read standard input from a terminal.
var errTerminal = errors.New("reading a discovery report from standard input, which is a terminal; " +
	"pipe `device-plugin discover -o json` into it or pass -f FILE")

func main() {
	os.Exit(cli.Exit("kubectl-rdma", run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr), os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	if ok, err := cli.Builtin("kubectl-rdma", usage, args, stdout, stderr); ok {
		return err
	}
	switch args[0] {
	case "topo":
		return topo(args[1:], stdin, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	if strings.HasPrefix(args[0], "-") {
		return cli.Usagef("unknown flag %q: flags follow the command (kubectl rdma topo -f FILE)", args[0])
	}
	return cli.Usagef("unknown command %q", args[0])
}

func topo(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topo", flag.ContinueOnError)
	file := fs.String("f", "-", "discovery report (JSON) to read; - for standard input")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: kubectl rdma topo [-f FILE]\n\nShows the RDMA devices, GPUs and the GPU x NIC PCIe matrix of a discovery\nreport (device-plugin discover -o json).\n\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
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
	} else if isTerminal(stdin) {
		return cli.Usagef("topo: %w", errTerminal)
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

// isTerminal reports whether r is a terminal (a file with termios).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
