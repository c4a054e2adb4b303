package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

func discoverCommand(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("discover", flag.ContinueOnError)
	sysRoot := fs.String("sysfs-root", "/sys", "sysfs root to read")
	procRoot := fs.String("proc-root", "/proc", "procfs root to read (NVIDIA GPU UUIDs)")
	output := fs.String("o", "table", "output format: "+strings.Join(report.Formats, " or "))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: device-plugin discover [flags]\n\nPrints the RDMA devices, GPUs and their PCIe affinity (PIX/PXB/PHB/NODE/SYS,\nas nvidia-smi topo -m names them) of this node, or of a node captured with\nhack/capture-sysfs.sh. The JSON form is a stable contract. For a built-in\nsample node: kube-rdma-demo discover --sample NAME.\n\n")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if !slices.Contains(report.Formats, *output) {
		return cli.Usagef("discover: output format %q: want %s", *output, strings.Join(report.Formats, " or "))
	}
	node, err := discovery.Scanner{SysRoot: *sysRoot, ProcRoot: *procRoot}.Scan()
	if err != nil {
		return err
	}
	return report.Write(stdout, node, *output)
}
