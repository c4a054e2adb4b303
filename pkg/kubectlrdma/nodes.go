package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func newNodesCommand(o *Options) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "nodes",
		Short: "Show each node's RDMA netns mode, pools, unhealthy devices and daemon",
		Long: `Shows one line per node: the kernel's RDMA netns mode, each pool as
allocated/allocatable/capacity, unhealthy devices, link layers, the daemon's
version and how long ago it last updated the node's RDMANodeState; -o wide
adds counts, the pools file's errors and each held device's holders (a
pod through the device plugin, claim:NAMESPACE/NAME for a DRA claim). A node
without an RDMANodeState shows "no kube-rdma daemon". -o json|yaml prints the
RDMANodeStateList.`,
		Example: `  kubectl rdma nodes
  kubectl rdma nodes -o wide
  kubectl rdma nodes -o yaml`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error { return o.runNodes(c.Context(), output) },
	}
	addOutputFlag(c, &output, outTable, outWide, outJSON, outYAML)
	return c
}

// maxGets is how many states without the summary table columns (written
// by older daemons) runNodes gets one by one before it lists them all.
const maxGets = 64

func (o *Options) runNodes(ctx context.Context, output string) error {
	cl, err := o.cluster()
	if err != nil {
		return err
	}
	if output == outJSON || output == outYAML {
		states, err := cl.ListStates(ctx)
		if err != nil {
			return err
		}
		sort.Slice(states, func(i, j int) bool { return states[i].Name < states[j].Name })
		l := v1alpha1.RDMANodeStateList{Items: states}
		l.APIVersion, l.Kind = v1alpha1.GroupVersion.String(), "RDMANodeStateList"
		for i := range l.Items {
			l.Items[i].APIVersion, l.Items[i].Kind = v1alpha1.GroupVersion.String(), "RDMANodeState"
		}
		return writeObject(o.Streams.Out, l, output)
	}
	// The default table asks the API server for the RDMANodeStates' table
	// columns, not the objects: at 5,000 HGX nodes the objects are ~60 MB
	// of JSON (3-4 s to list here), their table ~0.8 MB (0.1 s; docs/scale.md).
	// -o wide prints what only the objects hold (holders, config errors).
	var rows []StateRow
	var nodes []string
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		nodes, err = cl.NodeNames(gctx)
		return err
	})
	if output == outWide {
		g.Go(func() error {
			states, err := cl.ListStates(gctx)
			for i := range states {
				rows = append(rows, rowOf(&states[i]))
			}
			return err
		})
	} else {
		g.Go(func() error {
			var err error
			rows, err = cl.StateTable(gctx)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := completeRows(ctx, cl, rows); err != nil {
		return err
	}
	return writeNodes(o.Streams.Out, nodes, rows, output == outWide, o.Now())
}

// completeRows fills the summary table of each row whose state's writer did
// not publish it (a daemon older than the column), from the whole object:
// one get each for a few, one list for more (a rolling upgrade).
func completeRows(ctx context.Context, cl Cluster, rows []StateRow) error {
	var missing []int
	for i, r := range rows {
		if r.Table == nil && r.StateVersion <= v1alpha1.StateVersion {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	byName := map[string]*v1alpha1.RDMANodeState{}
	if len(missing) > maxGets {
		states, err := cl.ListStates(ctx)
		if err != nil {
			return err
		}
		for i := range states {
			byName[states[i].Name] = &states[i]
		}
	} else {
		for _, i := range missing {
			s, err := cl.GetState(ctx, rows[i].Name)
			if errors.Is(err, ErrNotFound) {
				continue // deleted since the table: print what the table said
			}
			if err != nil {
				return err
			}
			byName[s.Name] = s
		}
	}
	for _, i := range missing {
		if s := byName[rows[i].Name]; s != nil {
			rows[i] = rowOf(s)
		} else {
			rows[i].Table = &v1alpha1.SummaryTable{}
		}
	}
	return nil
}

// rowOf is the row of a whole state object: its table computed from it (as
// its writer computes the one it publishes) and the -o wide cells.
func rowOf(s *v1alpha1.RDMANodeState) StateRow {
	st := &s.Status
	return StateRow{Name: s.Name, StateVersion: st.StateVersion, NetnsMode: st.RDMANetnsMode,
		DaemonVersion: st.DaemonVersion, LastUpdate: st.LastUpdate.Time, Table: v1alpha1.NewSummaryTable(st),
		wide: []string{fmt.Sprint(len(st.Devices)), fmt.Sprint(len(st.GPUs)), fmt.Sprint(st.Summary.Pods),
			strings.Join(st.ConfigErrors, "; "), holders(st)}}
}

// writeNodes writes one row per Node, then one per state whose Node is
// gone. It returns an error after the table when a state is newer than
// this binary reads. Every cell is escaped here, where it is printed.
func writeNodes(w io.Writer, nodes []string, rows []StateRow, wide bool, now time.Time) error {
	byName := make(map[string]*StateRow, len(rows))
	for i := range rows {
		byName[rows[i].Name] = &rows[i]
	}
	names := make([]string, 0, len(nodes)+len(rows))
	exists := map[string]bool{}
	for _, n := range nodes {
		names, exists[n] = append(names, n), true
	}
	for _, r := range rows {
		if !exists[r.Name] {
			names = append(names, r.Name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	tw := newTable(w)
	header := []string{"NODE", "NETNS", "POOLS (ALLOCATED/ALLOCATABLE/CAPACITY)", "UNHEALTHY", "LINK", "DAEMON", "UPDATED"}
	if wide {
		header = append(header, "DEVICES", "GPUS", "PODS", "CONFIG ERRORS", "HOLDERS")
	}
	row(tw, header...)
	var errs []error
	for _, name := range names {
		r := byName[name]
		var cells []string
		switch {
		case r == nil:
			cells = padded(len(header), name, "no kube-rdma daemon")
		case r.StateVersion > v1alpha1.StateVersion:
			errs = append(errs, versionError(r.Name, r.StateVersion))
			cells = padded(len(header), name, fmt.Sprintf("state version %d: upgrade kubectl-rdma", r.StateVersion))
		default:
			t := r.Table
			if t == nil {
				t = &v1alpha1.SummaryTable{}
			}
			cells = []string{name, r.NetnsMode, t.Pools, t.UnhealthyDevices, t.LinkLayers, r.DaemonVersion, age(r.LastUpdate, now)}
			if !exists[name] {
				cells[0] += " (node gone)"
			}
			if wide {
				cells = append(cells, padded(len(header)-len(cells), r.wide...)...)
			}
		}
		for i := range cells {
			cells[i] = escapeString(cells[i])
		}
		row(tw, cells...)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// padded is cells with "" up to n: tabwriter aligns a column only over
// consecutive lines that all have it.
func padded(n int, cells ...string) []string {
	return append(cells, make([]string, max(0, n-len(cells)))...)
}

// age is kubectl's AGE: "5m", "3h", "2d"; "-" for the zero time.
func age(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(now.Sub(t)) + " ago"
}

func portStates(ports []v1alpha1.Port) string {
	if len(ports) == 0 {
		return "no ports"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("port %d %s", p.Port, p.State)
	}
	return strings.Join(s, ", ")
}
