package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

const memlockHookUsage = `usage: kube-rdma memlock-hook --limit unlimited|BYTES < OCI-STATE

The OCI createRuntime hook that the node daemon names in the CDI spec of each
pool (docs/device-plugin.md, Locked memory): the runtime runs it for every
container that gets one of the pool's devices, with the container's OCI state
on standard input, before the container's first process runs the workload.
It raises that process's RLIMIT_MEMLOCK (soft and hard) to at least --limit;
a higher limit stays. A container with devices of several pools gets the
highest of their limits. Processes started later with kubectl exec keep the
runtime's limit unless the NRI plugin is on (nri.enabled).

Exit status 0 when the limit holds, 1 when it could not be set (the runtime
then fails the container's creation and says why), 2 for a bad command line.

Flags:
`

// memlockHookCommand is the hook; the runtime runs it, not a person.
func memlockHookCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("memlock-hook", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), memlockHookUsage); fs.PrintDefaults() }
	limitArg := fs.String("limit", "", `the limit: "unlimited" or a number of bytes (required)`)
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if *limitArg == "" {
		fs.Usage()
		return cli.Usagef("--limit is required")
	}
	limit, err := memlockhook.ParseLimit(*limitArg)
	if err != nil {
		fs.Usage()
		return cli.Usagef("%v", err)
	}
	if _, err := memlockhook.Run(stdin, limit); err != nil {
		return fmt.Errorf("memlock-hook: %w", err)
	}
	return nil
}
