package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

const netdevHookUsage = `usage: kube-rdma netdev-hook --pool P --how HOW --devices D[,D...] [--bound] --state-dir DIR < OCI-STATE

The OCI createRuntime hook that the node daemon names on each device of the
pool whose pods get netdevs through the chained CNI entry, of a DRA claim
of that pool, and of a gpuAligned pool (--bound) (docs/device-plugin.md, Fail
closed): the runtime runs it for every container that gets the device,
with the container's OCI state on standard input, before the container's
first process runs the workload. It refuses the container when its pod
sandbox has no complete attachment record of every device in --devices (with
--bound: no complete record carrying the pool's binding) (the kube-rdma entry
was missing from the conflist when the sandbox was created),
so the runtime fails the container's creation with the message, which
kubectl describe pod shows. The daemon's NRI plugin refuses the same
containers while it is connected; this hook does whether or not it is.

It lets through the pod sandbox's own container, a container in the host's
network namespace (hostNetwork: no CNI ADD runs for it), a container whose
runtime names no pod sandbox in its annotations (containerd and CRI-O do)
and, with --pods, a container of a pod not listed there.

Exit status 0 to let the container run, 1 to refuse it (or when the state or
the records cannot be read), 2 for a bad command line.

Flags:
`

// netdevHookCommand is the hook; the runtime runs it, not a person.
func netdevHookCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(memlockhook.NetdevCommand, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), netdevHookUsage); fs.PrintDefaults() }
	var c memlockhook.NetdevCheck
	fs.StringVar(&c.Pool, "pool", "", "the devices' pool (required)")
	fs.StringVar(&c.How, "how", "chained CNI", "how the pool's pods get netdevs, for the message")
	devices := fs.String("devices", "", "the devices the container's CDI device stands for, comma-separated, each an RDMA name or NAME@FUNCTION (an SF's auxiliary device, else the PCI address): a record covers it by either (required)")
	fs.BoolVar(&c.Bound, "bound", false, "the pool binds its NICs at sandbox creation (binding gpuAligned): a complete record of the sandbox carrying the pool's binding covers every device in --devices")
	pods := fs.String("pods", "", "the UIDs of the only pods whose containers are checked, comma-separated (a DRA claim's pods when it was prepared); empty: every pod")
	fs.StringVar(&c.StateDir, "state-dir", "", `the CNI plugin's attachment records (a host path); "" when the plugin is not installed: every container is refused`)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	for _, d := range strings.Split(*devices, ",") {
		if d = strings.TrimSpace(d); d != "" {
			c.Devices = append(c.Devices, d)
		}
	}
	for _, u := range strings.Split(*pods, ",") {
		if u = strings.TrimSpace(u); u != "" {
			c.PodUIDs = append(c.PodUIDs, u)
		}
	}
	if c.Pool == "" || len(c.Devices) == 0 {
		fs.Usage()
		return cli.Usagef("--pool and --devices are required")
	}
	v, err := memlockhook.RunNetdev(stdin, c)
	if v.Refused {
		// The message starts with "kube-rdma: ", which cli.Exit prefixes:
		// the runtime's error then carries it once, as the NRI plugin's.
		return errors.New(strings.TrimPrefix(v.Message, "kube-rdma: "))
	}
	return err
}
