package kubectlrdma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

// ErrTerminal says topo -f - was started to read standard input from a
// terminal.
var ErrTerminal = errors.New("reading a discovery report from standard input, which is a terminal; " +
	"pipe `device-plugin discover -o json` into it or pass -f FILE")

func newTopoCommand(o *Options) *cobra.Command {
	var output, file string
	c := &cobra.Command{
		Use:   "topo (NODE | -f FILE)",
		Short: "Show a node's RDMA devices, GPUs and the GPU x NIC PCIe matrix",
		Long: `Shows the RDMA devices of a node (kind, PCI address, NUMA node, PCIe root,
netdevs, port states, link layer, rate) and the GPU x NIC matrix in the style
of nvidia-smi topo -m, with its legend. With NODE it reads the node's
RDMANodeState; with -f it reads a discovery report (device-plugin discover
-o json; - for standard input) and needs no cluster.`,
		Example: `  kubectl rdma topo gpu-node-1
  kubectl rdma topo gpu-node-1 -o yaml
  device-plugin discover -o json > node.json && kubectl rdma topo -f node.json
  device-plugin discover -o json | kubectl rdma topo -f -`,
		Args: func(c *cobra.Command, args []string) error {
			if file != "" {
				return noArgs(c, args)
			}
			return exactArgs(1, "one NODE (or -f FILE)")(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			if file != "" {
				return o.topoFile(file, output)
			}
			return o.topoNode(c.Context(), args[0], output)
		},
	}
	c.Flags().StringVarP(&file, "filename", "f", "", "discovery report (JSON) to read instead of the cluster; - for standard input")
	addOutputFlag(c, &output, outTable, outJSON, outYAML)
	return c
}

func (o *Options) topoNode(ctx context.Context, node, output string) error {
	cl, err := o.cluster()
	if err != nil {
		return err
	}
	s, err := stateOf(ctx, cl, node)
	if err != nil {
		return err
	}
	if output != outTable {
		s.APIVersion, s.Kind = v1alpha1.GroupVersion.String(), "RDMANodeState"
		return writeObject(o.Streams.Out, s, output)
	}
	n := toDiscovery(s.DeepCopy())
	escapeAll(n)
	return report.WriteTableWith(o.Streams.Out, n, report.TableOptions{NoCharDevices: true})
}

// stateOf is node's state, checked for its version; a missing state is
// ErrNoDaemon when the Node exists and ErrNotFound when it does not.
func stateOf(ctx context.Context, cl Cluster, node string) (*v1alpha1.RDMANodeState, error) {
	s, err := cl.GetState(ctx, node)
	if errors.Is(err, ErrNotFound) {
		if _, nerr := cl.GetNode(ctx, node); nerr != nil {
			return nil, nerr
		}
		return nil, fmt.Errorf("%w on node %s: no RDMANodeState %s (is the daemon scheduled there? kubectl get pods -A -l app.kubernetes.io/name=kube-rdma -o wide)", ErrNoDaemon, node, node)
	}
	if err != nil {
		return nil, err
	}
	return s, checkVersion(s)
}

func (o *Options) topoFile(file, output string) error {
	var in io.Reader = o.Streams.In
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("read discovery report: %w", err)
		}
		defer func() { _ = f.Close() }()
		in = f
	} else if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return cli.Usagef("topo: %w", ErrTerminal)
	}
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	var n discovery.Node
	if err := dec.Decode(&n); err != nil {
		return fmt.Errorf("read discovery report %s: %w", file, err)
	}
	if n.RDMADevices == nil && n.GPUs == nil {
		return fmt.Errorf("read discovery report %s: no rdmaDevices or gpus: not a discovery report", file)
	}
	if output != outTable {
		return writeObject(o.Streams.Out, &n, output)
	}
	escapeAll(&n)
	return report.WriteTable(o.Streams.Out, &n)
}
