package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

const reclaimUsage = `usage: kube-rdma reclaim [flags] CONTAINER_ID/IFNAME...

Run DEL's restore for attachments whose DEL never came (docs/cni.md,
"Reclaiming attachments"): each attachment's devices back on the host,
its IPAM released, its record removed, under the plugin's node-wide lock
and each attachment's own lock. The node agent's reclaimer runs it from
the CNI bin directory for the records it found orphaned, so the restore
is always the installed plugin's: the code that wrote the records. It acts
only on attachments whose pod netns is gone.

It prints one JSON object per attachment on standard output, in the order
given: {"containerID","ifName","pod","skipped","error"}; "skipped"
says why nothing was done, "error" why the record stays. Exit status 0 when
it ran (per-attachment failures are in the output), 2 for a bad command
line, 1 for any other failure; logs go to stderr.

Flags:
`

// reclaimResult is one line of reclaim's output (cnireclaim's exec
// restorer reads it).
type reclaimResult struct {
	ContainerID string             `json:"containerID"`
	IfName      string             `json:"ifName"`
	Pod         *attachment.PodRef `json:"pod,omitempty"`
	Skipped     string             `json:"skipped,omitempty"`
	Error       string             `json:"error,omitempty"`
}

func reclaimCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reclaim", flag.ContinueOnError)
	stateDir := fs.String("state-dir", netconf.DefaultStateDir, "the plugin's stateDir: the attachment records")
	cniPath := fs.String("cni-path", "/opt/cni/bin", "where the IPAM plugins are")
	sysfs := fs.String("sysfs-root", "/sys", "sysfs root: tells a NIC on its way back from one that is gone")
	procRoot := fs.String("proc-root", "/proc", "procfs root: the boot ID, unless --boot-id gives it")
	bootID := fs.String("boot-id", "", "this boot's ID (the records of another boot are released); empty: read from --proc-root")
	wait := fs.Duration("return-wait", 500*time.Millisecond, "how long to wait for a NIC the kernel has not returned yet; the next run looks again")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), reclaimUsage)
		fs.PrintDefaults()
	}
	if err := cli.ParseArgs(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return cli.Usagef("reclaim: no CONTAINER_ID/IFNAME given")
	}
	var keys []attachment.Key
	for _, a := range fs.Args() {
		id, ifName, ok := strings.Cut(a, "/")
		if !ok || id == "" || ifName == "" || strings.Contains(ifName, "/") {
			return cli.Usagef("reclaim: %q: want CONTAINER_ID/IFNAME", a)
		}
		keys = append(keys, attachment.Key{ContainerID: id, IfName: ifName})
	}
	if *wait < 0 {
		return cli.Usagef("reclaim: --return-wait %s: want 0 or more", *wait)
	}
	boot := *bootID
	if boot == "" {
		var err error
		if boot, err = attachment.ReadBootID(*procRoot); err != nil {
			return err
		}
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	p, err := cni.NewReclaimer(log, boot, *wait, *stateDir)
	if err != nil {
		return err
	}
	defer func() { _ = p.HostNS.Close() }()
	p, err = withE2EFakes(p, nil)
	if err != nil {
		return err
	}
	opts := cni.ReclaimOpts{Store: attachment.Store{Dir: *stateDir, BootID: boot}, CNIPath: *cniPath, SysfsRoot: *sysfs}
	enc := json.NewEncoder(stdout)
	for _, r := range p.Reclaim(ctx, opts, keys) {
		out := reclaimResult{ContainerID: r.Key.ContainerID, IfName: r.Key.IfName, Pod: r.Pod, Skipped: r.Skipped}
		if r.Err != nil {
			out.Error = r.Err.Error()
		}
		if err := enc.Encode(out); err != nil {
			return err
		}
	}
	return nil
}
