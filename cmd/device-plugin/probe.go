package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/internal/podprobe"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
)

// defaultProbeSocket is where the chart's per-pod emptyDir holds the probe
// socket (`run --probe-socket`). Not under /run/kube-rdma: the gpuAligned
// pools' host directory is mounted at /var/run/kube-rdma/alloc, which is
// /run/kube-rdma/alloc wherever /var/run links to /run.
const defaultProbeSocket = "/run/kube-rdma-probe/probe.sock"

// probeCommand is the kubelet's exec probe of the daemon's pod: it asks the
// daemon of its own pod, over the socket in the pod's emptyDir, whether a
// check holds, and exits 0 when it does.
func probeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	socket := fs.String("socket", defaultProbeSocket, "the probe socket the daemon serves (run --probe-socket)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: device-plugin probe ready|live [flags]\n\nAsks the daemon of this pod (run --probe-socket) whether it is ready (its first\nscan done, every pool served and registered with the kubelet) or live (its\nfirst scan done); exits 0 when it is. The kubelet's exec probes run it.\n\n")
		fs.PrintDefaults()
	}
	check := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		check, args = args[0], args[1:]
		if check != "ready" && check != "live" {
			fs.SetOutput(stderr)
			fs.Usage()
			return cli.Usagef("probe: unknown check %q, want ready or live", check)
		}
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if check == "" {
		fs.Usage() // Parse left fs writing to stderr
		return cli.Usagef("probe: want a check first, ready or live")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	return podprobe.Check(ctx, *socket, check)
}

// listenProbe serves the probe socket of `run` (none when path is ""):
// ready once the agent is ready and every device plugin pool of the first
// config is served and registered, live once the first scan is done.
func listenProbe(path string, a *agent.Agent, dp *deviceplugin.Plugin) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	ready := make(chan struct{})
	go func() {
		<-a.Ready()
		<-dp.Registered()
		close(ready)
	}()
	s, err := podprobe.Listen(path, podprobe.Checks{"ready": ready, "live": a.Ready()})
	if err != nil {
		return nil, err
	}
	return func() { _ = s.Close() }, nil
}
