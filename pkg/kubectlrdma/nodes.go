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
	corev1 "k8s.io/api/core/v1"
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

func (o *Options) runNodes(ctx context.Context, output string) error {
	cl, err := o.cluster()
	if err != nil {
		return err
	}
	states, err := cl.ListStates(ctx)
	if err != nil {
		return err
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Name < states[j].Name })
	if output == outJSON || output == outYAML {
		l := v1alpha1.RDMANodeStateList{Items: states}
		l.APIVersion, l.Kind = v1alpha1.GroupVersion.String(), "RDMANodeStateList"
		for i := range l.Items {
			l.Items[i].APIVersion, l.Items[i].Kind = v1alpha1.GroupVersion.String(), "RDMANodeState"
		}
		return writeObject(o.Streams.Out, l, output)
	}
	nodes, err := cl.ListNodes(ctx)
	if err != nil {
		return err
	}
	return writeNodes(o.Streams.Out, nodes, states, output == outWide, o.Now())
}

// writeNodes writes one row per Node, then one per state whose Node is
// gone. It returns an error after the table when a state is newer than
// this binary reads.
func writeNodes(w io.Writer, nodes []corev1.Node, states []v1alpha1.RDMANodeState, wide bool, now time.Time) error {
	nodes, states = escapedCopies(nodes), escapedCopies(states)
	byName := make(map[string]*v1alpha1.RDMANodeState, len(states))
	for i := range states {
		byName[states[i].Name] = &states[i]
	}
	names := make([]string, 0, len(nodes)+len(states))
	exists := map[string]bool{}
	for _, n := range nodes {
		names, exists[n.Name] = append(names, n.Name), true
	}
	for _, s := range states {
		if !exists[s.Name] {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	tw := newTable(w)
	header := []string{"NODE", "NETNS", "POOLS (ALLOCATED/ALLOCATABLE/CAPACITY)", "UNHEALTHY", "LINK", "DAEMON", "UPDATED"}
	if wide {
		header = append(header, "DEVICES", "GPUS", "PODS", "CONFIG ERRORS", "HOLDERS")
	}
	row(tw, header...)
	var errs []error
	for _, name := range names {
		s := byName[name]
		switch {
		case s == nil:
			row(tw, padded(len(header), name, "no kube-rdma daemon")...)
			continue
		case checkVersion(s) != nil:
			errs = append(errs, checkVersion(s))
			row(tw, padded(len(header), name, fmt.Sprintf("state version %d: upgrade kubectl-rdma", s.Status.StateVersion))...)
			continue
		}
		cells := nodeCells(s, now)
		if !exists[name] {
			cells[0] += " (node gone)"
		}
		if wide {
			st := s.Status
			cells = append(cells, fmt.Sprint(len(st.Devices)), fmt.Sprint(len(st.GPUs)), fmt.Sprint(st.Summary.Pods), strings.Join(st.ConfigErrors, "; "), holders(&st))
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
	return append(cells, make([]string, n-len(cells))...)
}

func nodeCells(s *v1alpha1.RDMANodeState, now time.Time) []string {
	st := &s.Status
	var pools, unhealthy, links []string
	for _, p := range st.Pools {
		pools = append(pools, fmt.Sprintf("%s %d/%d/%d", p.Name, p.Allocated, p.Allocatable, p.Capacity))
	}
	for _, d := range st.Devices {
		if !d.Healthy {
			unhealthy = append(unhealthy, d.Name)
		}
		if d.LinkLayer != "" && !slices.Contains(links, d.LinkLayer) {
			links = append(links, d.LinkLayer)
		}
	}
	slices.Sort(links)
	return []string{s.Name, st.RDMANetnsMode, strings.Join(pools, ", "), strings.Join(unhealthy, ","),
		strings.Join(links, ","), st.DaemonVersion, age(st.LastUpdate.Time, now)}
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
