// Command kube-rdma is the CNI plugin that moves an RDMA NIC's netdev and
// RDMA device into a pod and back. The runtime runs it with CNI_* variables
// and the network configuration on stdin; see docs/cni.md. Run by hand
// (no CNI_COMMAND), it answers --help and --version, and `install` puts it
// on a node: the binary in the CNI bin directory, its entry in the primary
// conflist (docs/cni.md, Installing).
//
// It is exec'd for every ADD and DEL, so start-up counts: build it static
// and stripped (CGO_ENABLED=0 go build -trimpath -ldflags='-s -w'), which
// takes about a fifth off an ADD+DEL pair on a loaded node.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

const about = "kube-rdma CNI plugin: RDMA NIC netdev and RDMA device into the pod and back"

var usage = `usage: kube-rdma [install [flags] | uninstall [flags] | reclaim [flags] ID/IF... | memlock-hook --limit L | netdev-hook ... | help | version]

` + about + `.
The container runtime runs it with CNI_COMMAND (ADD, DEL, CHECK, STATUS, GC or
VERSION) and the other CNI_* variables set, and the network configuration on
standard input; see docs/cni.md. CNI spec versions: ` + strings.Join(cni.Versions.SupportedVersions(), ", ") + `.

Commands (without CNI_COMMAND):
  install    install the binary in the CNI bin directory and chain the
             plugin into the primary conflist, and keep it there (install -h)
  uninstall  take the entry, the binary and its node file out again (the
             chart's pre-delete hook; uninstall -h)
  reclaim    run DEL's restore for attachments whose DEL never came (the
             node agent's reclaimer runs it; reclaim -h)
  memlock-hook
             the OCI hook the node daemon names in its CDI specs: raises
             the locked-memory limit of a container with its devices
             (memlock-hook -h); the runtime runs it, not a person
  netdev-hook
             the OCI hook the node daemon names on the devices of the
             chained pool: refuses a container whose pod sandbox got no
             netdevs of them (netdev-hook -h); the runtime runs it
  version    print the version, commit and build date (also --version)
  help       print this help (also -h, --help)
`

func main() {
	cni.StartTimings()
	// A runtime never passes arguments; a person asking for help does.
	if os.Getenv("CNI_COMMAND") == "" && len(os.Args) > 1 {
		os.Exit(cli.Exit("kube-rdma", command(os.Args[1:], os.Stdout, os.Stderr), os.Stderr))
	}
	newPlugin := func() (*cni.Plugin, error) { return withE2EFakes(cni.New(os.Stderr)) }
	os.Exit(cni.Main(context.Background(), newPlugin, about))
}

// command answers a person: install, help and version.
func command(args []string, stdout, stderr io.Writer) error {
	switch args[0] {
	case "install":
		return installCommand(args[1:], stdout, stderr)
	case "uninstall":
		return uninstallCommand(args[1:], stdout, stderr)
	case "reclaim":
		return reclaimCommand(context.Background(), args[1:], stdout, stderr)
	case memlockhook.Command:
		return memlockHookCommand(args[1:], os.Stdin, stdout, stderr)
	case memlockhook.NetdevCommand:
		return netdevHookCommand(args[1:], os.Stdin, stdout, stderr)
	}
	if ok, err := cli.Builtin("kube-rdma", usage, args, stdout, stderr); ok {
		if err == nil && cli.IsVersion(args[0]) {
			fmt.Fprintf(stdout, "CNI spec versions: %s\n", strings.Join(cni.Versions.SupportedVersions(), ", "))
		}
		return err
	}
	fmt.Fprint(stderr, usage)
	return cli.Usagef("unknown command %q (a runtime runs kube-rdma with CNI_COMMAND set)", args[0])
}
