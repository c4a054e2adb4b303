// Command kube-rdma-demo shows kube-rdma on built-in sample nodes: it writes
// a sample node's sysfs into a temporary directory, runs discovery on it and
// runs the device plugin daemon on it against an in-process kubelet
// stand-in. It needs no root, no cluster and no RDMA hardware. It is built
// by `make demo` and is not part of the image: it links the sysfs tree
// writer (nodesim) and the kubelet stand-in, which the daemon must not.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

var usage = `usage: kube-rdma-demo [command] [flags]

Runs kube-rdma on a built-in sample node: no root, no cluster, no RDMA hardware.

Commands:
  run       discovery, then the device plugin daemon against a kubelet
            stand-in, on a sample node (the default)
  discover  print what discovery sees on a sample node (like
            device-plugin discover on a real node)
  version   print the version, commit and build date
  help      print this help

Sample nodes: ` + strings.Join(nodesim.Names(), ", ") + `.
Run 'kube-rdma-demo <command> -h' for the command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("kube-rdma-demo", err, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("kube-rdma-demo", usage, "run", args, stdout, stderr, map[string]func([]string) error{
		"run":      func(args []string) error { return runCommand(ctx, args, stdout, stderr) },
		"discover": func(args []string) error { return discoverCommand(args, stdout, stderr) },
	})
}
