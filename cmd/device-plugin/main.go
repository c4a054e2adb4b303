// Command device-plugin is the kube-rdma node daemon. `run` (the default)
// advertises RDMA devices to the kubelet; `discover` prints what discovery
// sees on this node. The demo on built-in sample nodes is a separate binary,
// kube-rdma-demo, so that none of its test scaffolding ships in the image.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/kube-rdma/kube-rdma/internal/cli"
)

const usage = `usage: device-plugin [command] [flags]

The kube-rdma node daemon.

Commands:
  run       advertise RDMA devices to the kubelet (the default)
  discover  print the RDMA devices, GPUs and their PCIe affinity on this node
  version   print the version, commit and build date
  help      print this help

Run 'device-plugin <command> -h' for the command's flags. The demo on built-in
sample nodes is the separate kube-rdma-demo binary (make demo).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(cli.Exit("device-plugin", err, os.Stderr))
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if ok, err := cli.Builtin("device-plugin", usage, args, stdout, stderr); ok {
		return err
	}
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runCommand(ctx, args, stdout, stderr)
	case "discover":
		return discoverCommand(args, stdout, stderr)
	}
	fmt.Fprint(stderr, usage)
	return cli.Usagef("unknown command %q", cmd)
}
