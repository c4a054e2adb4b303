// Command device-plugin is the kube-rdma node daemon. `run` (the default)
// advertises RDMA devices to the kubelet; `discover` prints what discovery
// sees on this node or on a built-in sample node; `demo` runs the daemon on a
// built-in sample node against an in-process kubelet stand-in.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: device-plugin [command] [flags]

Commands:
  run       advertise RDMA devices to the kubelet (the default)
  discover  print the RDMA devices, GPUs and their PCIe affinity
  demo      run discovery and the device plugin on a built-in sample node

Run 'device-plugin <command> -h' for the command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	default:
		fmt.Fprintln(os.Stderr, "device-plugin:", err)
		os.Exit(1)
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runCommand(ctx, args, stderr)
	case "discover":
		return discoverCommand(args, stdout, stderr)
	case "demo":
		return demoCommand(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}
