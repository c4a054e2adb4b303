package main

import (
	"context"
	"time"

	"fmt"
	"io"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"maps"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// Result is one N's figures.
type Result struct {
	// Run labels the run (-run): a run replaces the figures of its own
	// label and N in the -out file and keeps the others'.
	Run      string  `json:"run,omitempty"`
	N        int     `json:"n"`
	BigNodes int     `json:"bigNodes"`
	Date     string  `json:"date"`
	SetupS   float64 `json:"setupS"`
	// NotReady counts the nodes not Ready after the steady-state window,
	// NotReadyAfter before the scheduling runs: either above 0 means the
	// simulator fell behind with the Leases, and the figures after it are
	// not those of a healthy cluster.
	NotReady      int `json:"notReady"`
	NotReadyAfter int `json:"notReadyBeforeScheduling"`
	// EtcdBytes is the stored size (key + value) per node by object kind,
	// "@1024" for the 1,024-device nodes; EtcdObjects counts the objects.
	EtcdBytes   map[string]float64 `json:"etcdBytesPerNode"`
	EtcdObjects map[string]int     `json:"etcdObjects"`
	// Steady is writes per node per minute by resource with nothing
	// changing (the Lease renewals are the simulator's, at its rate).
	Steady                map[string]float64 `json:"steadyWritesPerNodeMin"`
	SteadyPublisherWrites int                `json:"steadyPublisherWrites"`
	// SteadyEvents counts the Events of the steady-state window by
	// "component: reason" (whose writes "events" are).
	SteadyEvents map[string]int `json:"steadyEvents"`
	Storm        Storm          `json:"storm"`
	Kubectl      []Timing       `json:"kubectl"`
	Sched        []Sched        `json:"sched"`
	// ClaimWatch: the DRA claim reconciler's requests (nil: not run).
	ClaimWatch *ClaimWatch `json:"claimWatch,omitempty"`
}

// Storm is the port-flap storm's figures.
type Storm struct {
	Nodes   int     `json:"nodes"`
	Flaps   int     `json:"flaps"`
	Seconds float64 `json:"seconds"`
	// PublisherWrites counts the RDMANodeState writes the publishers made.
	PublisherWrites       int                `json:"publisherWrites"`
	PerFlappingNodeMinute map[string]float64 `json:"writesPerFlappingNodeMin"`
}

func sortResults(rs []Result) {
	slices.SortFunc(rs, func(a, b Result) int {
		if a.N != b.N {
			return a.N - b.N
		}
		return strings.Compare(a.Run, b.Run)
	})
}

// etcdFigures reads the stored objects of the nodes from etcd.
func (c *cluster) etcdFigures(ctx context.Context, r *Result) error {
	r.EtcdBytes, r.EtcdObjects = map[string]float64{}, map[string]int{}
	kind := func(node string) string {
		if c.big[node] {
			return "@1024"
		}
		return ""
	}
	nodeOf := func(name string) string { return name[:min(len(name), len("gpu-node-00000"))] }
	for _, p := range []struct{ prefix, what string }{
		{"/registry/minions/", "node"},
		{"/registry/leases/kube-node-lease/", "lease"},
		{"/registry/" + v1alpha1.GroupVersion.Group + "/" + v1alpha1.Resource + "/", "rdmanodestate"},
		{"/registry/resourceslices/", "resourceslices"},
	} {
		sizes, counts, err := c.cp.etcdBytes(ctx, p.prefix, func(key string) string {
			name := strings.TrimPrefix(key, p.prefix)
			what := p.what
			if p.what == "resourceslices" {
				what += map[bool]string{true: "/rdma", false: "/gpu"}[strings.Contains(name, dra.DriverName)]
			}
			return what + kind(nodeOf(name))
		})
		if err != nil {
			return err
		}
		maps.Copy(r.EtcdObjects, counts)
		for k, v := range sizes {
			nodes := len(c.nodes) - len(c.big)
			if strings.HasSuffix(k, "@1024") {
				nodes = len(c.big)
			}
			r.EtcdBytes[k] = float64(v) / float64(max(nodes, 1))
		}
	}
	return nil
}

func (r Result) print(w io.Writer) {
	fmt.Fprintf(w, "\n== N=%d nodes (%d of them the 1,024-device node), set up in %.0f s\n", r.N, r.BigNodes, r.SetupS)
	if r.NotReady > 0 || r.NotReadyAfter > 0 {
		fmt.Fprintf(w, "WARNING: %d nodes NotReady after the steady state, %d before scheduling: the simulator fell behind with the Leases\n",
			r.NotReady, r.NotReadyAfter)
	}
	fmt.Fprintln(w, "etcd bytes per node (key+value):")
	for _, k := range slices.Sorted(maps.Keys(r.EtcdBytes)) {
		fmt.Fprintf(w, "  %-28s %9.0f  (%d objects)\n", k, r.EtcdBytes[k], r.EtcdObjects[k])
	}
	fmt.Fprintln(w, "steady state, writes per node per minute:")
	for _, k := range slices.Sorted(maps.Keys(r.Steady)) {
		fmt.Fprintf(w, "  %-28s %9.4f\n", k, r.Steady[k])
	}
	fmt.Fprintf(w, "  (publishers' own count: %d writes)\n", r.SteadyPublisherWrites)
	for _, k := range slices.Sorted(maps.Keys(r.SteadyEvents)) {
		fmt.Fprintf(w, "  events %-40s %d\n", k, r.SteadyEvents[k])
	}
	if cw := r.ClaimWatch; cw != nil {
		fmt.Fprintf(w, "DRA claim reconciler, %d nodes x %d prepared claims: set-up requests %v; steady state per node per minute: reads %.4f (%s), writes %.4f\n",
			cw.Nodes, cw.ClaimsPerNode, cw.Setup, cw.reads(), fmtPerMin(cw.SteadyPerMin), cw.writes())
	}
	s := r.Storm
	fmt.Fprintf(w, "port-flap storm: %d nodes, %d flaps in %.0f s; publishers wrote %d times; writes per flapping node per minute:\n",
		s.Nodes, s.Flaps, s.Seconds, s.PublisherWrites)
	for _, k := range slices.Sorted(maps.Keys(s.PerFlappingNodeMinute)) {
		fmt.Fprintf(w, "  %-28s %9.2f\n", k, s.PerFlappingNodeMinute[k])
	}
	fmt.Fprintln(w, "kubectl (median of 3 wall, max RSS):")
	for _, t := range r.Kubectl {
		fmt.Fprintf(w, "  %-28s %6.2f s %7.1f MiB  %d lines\n", t.Command, t.WallS, t.RSSMiB, t.Lines)
	}
	fmt.Fprintln(w, "DRA scheduling (GPU + NIC per pod):")
	var ref *Sched
	for i, x := range r.Sched {
		if x.Claim == claimUnaligned {
			ref = &r.Sched[i]
		}
	}
	for _, x := range r.Sched {
		fmt.Fprintf(w, "  %-11s %d/%d scheduled at %.1f/s created %.1f/s; create-to-scheduled P50 %.2f s P99 %.2f s; NIC under the GPU's switch %.0f%%",
			x.Claim, x.Scheduled, x.Pods, x.PerS, x.RatePerS, x.P50S, x.P99S, 100*x.Aligned)
		if x.Fallback != nil {
			fmt.Fprintf(w, "; fallback %.0f%%", 100**x.Fallback)
		}
		if ref != nil && x.Claim != claimUnaligned && ref.PerS > 0 && ref.P50S > 0 {
			fmt.Fprintf(w, "; against unaligned: %.2fx the pods/s, %.2fx the P50", x.PerS/ref.PerS, x.P50S/ref.P50S)
		}
		fmt.Fprintln(w)
	}
}

// eventReasons counts the Events written since by "component: reason".
func (c *cluster) eventReasons(ctx context.Context, since time.Time) (map[string]int, error) {
	l, err := c.kube.EventsV1().Events("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := map[string]int{}
	for _, e := range l.Items {
		t := e.CreationTimestamp.Time
		if e.Series != nil {
			t = e.Series.LastObservedTime.Time
		}
		if t.Before(since) {
			continue
		}
		out[e.ReportingController+": "+e.Reason+" "+e.Regarding.Kind]++
	}
	return out, nil
}

func fmtPerMin(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.4f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
