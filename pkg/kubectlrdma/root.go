package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/internal/cli"
)

const prog = "kubectl-rdma"

// Options are what the commands share. Zero fields take their defaults in
// Execute: the kubeconfig of the flags, the wall clock, colour on a terminal.
type Options struct {
	Streams genericiooptions.IOStreams
	// NewCluster builds the Cluster from the kubeconfig flags.
	NewCluster func(genericclioptions.RESTClientGetter) (Cluster, error)
	// NewExecer builds what doctor execs in containers with.
	NewExecer func(genericclioptions.RESTClientGetter) (Execer, error)
	// NewDebugger builds what bw --image adds ephemeral containers with.
	NewDebugger func(genericclioptions.RESTClientGetter) (Debugger, error)
	// Now is the clock ages are measured against.
	Now func() time.Time
	// Color colours doctor's verdicts (set when stdout is a terminal).
	Color bool

	flags *genericclioptions.ConfigFlags
}

// Execute runs the command line args and returns the process exit status:
// 0 ok, 1 an error, 2 a command line it cannot run. Errors go to
// o.Streams.ErrOut on one line, after the usage for a usage error.
func Execute(ctx context.Context, args []string, o Options) int {
	if o.NewCluster == nil {
		o.NewCluster = NewCluster
	}
	if o.NewExecer == nil {
		o.NewExecer = NewExecer
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	root := NewRootCommand(&o)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && errors.Is(err, cli.ErrUsage) {
		fmt.Fprintf(o.Streams.ErrOut, "usage: %s\nSee '%s --help' for examples and flags.\n", cmd.UseLine(), cmd.CommandPath())
	}
	return cli.Exit(prog, oneLine(err), o.Streams.ErrOut)
}

// IsTerminal reports whether w is a terminal and NO_COLOR is unset: the
// binary's default for Options.Color.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && os.Getenv("NO_COLOR") == "" && term.IsTerminal(int(f.Fd()))
}

// NewRootCommand is `kubectl rdma` with every subcommand.
func NewRootCommand(o *Options) *cobra.Command {
	o.flags = genericclioptions.NewConfigFlags(true)
	root := &cobra.Command{
		Use:   prog,
		Short: "Inspect kube-rdma: RDMA devices, pools, GPU x NIC topology and pod allocations",
		Long: `kubectl rdma reads the RDMANodeState objects the kube-rdma device plugin daemons
publish (one per node), with Nodes and Pods, and shows them: pools and health per
node, the GPU x NIC PCIe matrix of a node, the NICs and GPUs of each pod, and a
checklist of what stands between a pod and working RDMA, and the RDMA bandwidth
between two pods. It creates, patches or deletes no object (bw --image alone adds
an ephemeral container to each of its two pods); doctor and bw exec into pods
(pods/exec).`,
		Example: `  kubectl rdma nodes
  kubectl rdma topo gpu-node-1
  kubectl rdma pods -A
  kubectl rdma doctor my-training-pod-0
  kubectl rdma doctor node/gpu-node-1
  kubectl rdma bw -n training worker-0 worker-1`,
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl rdma"},
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q", args[0])
			}
			return nil
		},
		// --version is handled here, not by cobra's Version field: cobra
		// prints a custom version line through text/template, and a
		// reachable template makes the linker keep every exported method of
		// every linked type (reflect's MethodByName): MBs of the binary.
		RunE: func(c *cobra.Command, _ []string) error {
			if v, _ := c.Flags().GetBool("version"); v {
				cli.PrintVersion(o.Streams.Out, prog)
				return nil
			}
			return c.Help()
		},
	}
	root.SetIn(o.Streams.In)
	root.SetOut(o.Streams.Out)
	root.SetErr(o.Streams.ErrOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.Usagef("%w", err) })
	o.flags.AddFlags(root.PersistentFlags())
	root.Flags().Bool("version", false, "print the version, commit and build date") // no -v: kubectl's verbosity
	root.AddCommand(newNodesCommand(o), newTopoCommand(o), newPodsCommand(o), newDoctorCommand(o), newBWCommand(o), newVersionCommand(o))
	return root
}

func newVersionCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the version, commit and build date",
		Example: "  kubectl rdma version",
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			cli.PrintVersion(o.Streams.Out, prog)
			return nil
		},
	}
}

// noArgs and exactArgs are cobra's validators with usage errors (exit 2).
func noArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return cli.Usagef("%s takes no arguments, got %q", c.Name(), args)
	}
	return nil
}

func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return cli.Usagef("%s takes %s, got %q", c.Name(), what, args)
		}
		return nil
	}
}

// cluster builds the Cluster from the kubeconfig flags.
func (o *Options) cluster() (Cluster, error) {
	return o.NewCluster(o.flags)
}

// namespace is -n, else the kubeconfig context's namespace.
func (o *Options) namespace() (string, error) {
	ns, _, err := o.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("kubeconfig namespace: %w", err)
	}
	return ns, nil
}

// oneLine keeps an error on one line: API server and exec errors can
// carry newlines, and a plugin's error is one line of stderr.
func oneLine(err error) error {
	if err == nil || !needsEscape(err.Error()) {
		return err
	}
	return lineError{err}
}

// lineError is an error on one line, with what a terminal would act on
// (escape sequences from an object's strings) escaped.
type lineError struct{ error }

func (e lineError) Error() string {
	return escapeString(strings.Join(strings.Fields(e.error.Error()), " "))
}
func (e lineError) Unwrap() error { return e.error }
