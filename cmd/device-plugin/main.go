// Command device-plugin is the kube-rdma node daemon. `run` (the default)
// advertises RDMA devices to the kubelet; `discover` prints what discovery
// sees on this node; `probe` is the pod's exec readiness and liveness probe. The demo on built-in sample nodes is a separate binary,
// kube-rdma-demo, so that none of its test scaffolding ships in the image.
package main

import (
	"context"
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
  probe     ask this pod's daemon whether it is ready or live (exec probes)
  wait-daemonset
            wait until a DaemonSet's pods are up to date and ready (the
            chart's pre-delete hook)
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
	return cli.Dispatch("device-plugin", usage, "run", args, stdout, stderr, map[string]func([]string) error{
		"run":      func(args []string) error { return runCommand(ctx, args, stdout, stderr) },
		"discover": func(args []string) error { return discoverCommand(args, stdout, stderr) },
		"probe":    func(args []string) error { return probeCommand(ctx, args, stdout, stderr) },
		"wait-daemonset": func(args []string) error {
			return waitDaemonSetCommand(ctx, args, stdout, stderr)
		},
	})
}
