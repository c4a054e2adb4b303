// Command scale measures what kube-rdma costs a Kubernetes control plane
// at N GPU nodes (make scale, make scale-short; docs/scale.md): the real
// etcd, kube-apiserver, kube-scheduler and kube-controller-manager of the
// local-node build, and N simulated nodes, each with a Node kept Ready by
// its Lease, the RDMANodeState the real publisher (pkg/nodestate) writes
// for a nodesim topology, the ResourceSlices the real DRA device builder
// (pkg/dra) makes for it plus a simulated GPU driver's, and workload pods.
// It prints a report and writes its figures as JSON for hack/scale/plot.
//
// It is a development tool: no shipped binary links it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/reqcount"
)

type options struct {
	ns          []int
	bin         string
	kubectlRDMA string
	crds        string
	out         string
	podsPerNode int
	bigEvery    int
	steady      time.Duration
	storm       time.Duration
	stormShare  float64
	schedPods   int
	schedRate   float64
	claimNodes  int
	claimsPer   int
	keep        bool
	check       bool
	hold        time.Duration
	run         string
}

func main() {
	var o options
	var ns string
	flag.StringVar(&ns, "n", "50", "node counts, comma separated: one control plane each")
	flag.StringVar(&o.bin, "bin", "/var/cache/kube-rdma-e2e/bin/current", "etcd, kube-* and kubectl of the local-node build")
	flag.StringVar(&o.kubectlRDMA, "kubectl-rdma", "bin/kubectl-rdma", "the kubectl-rdma binary to time")
	flag.StringVar(&o.crds, "crds", "deploy/helm/kube-rdma/crds", "the RDMANodeState CRD")
	flag.StringVar(&o.out, "out", "", "write the figures as JSON here, merged with the file's figures of other runs and node counts")
	flag.StringVar(&o.run, "run", "", "this run's label in the -out file (make scale SCALE_RUN=2 adds a second run's figures)")
	flag.IntVar(&o.podsPerNode, "pods-per-node", 8, "workload pods per node")
	flag.IntVar(&o.bigEvery, "big-every", 1000, "one node in this many is the 1,024-device node (at least one)")
	flag.DurationVar(&o.steady, "steady", time.Minute, "the steady-state window")
	flag.DurationVar(&o.storm, "storm", time.Minute, "the port-flap storm")
	flag.Float64Var(&o.stormShare, "storm-share", 0.1, "share of the nodes that flap a port every second in the storm")
	flag.IntVar(&o.schedPods, "sched-pods", 400, "pods per DRA scheduling run (at most a quarter of the GPUs: three runs share the nodes)")
	flag.Float64Var(&o.schedRate, "sched-rate", 20, "pods created per second in the DRA scheduling runs")
	flag.IntVar(&o.claimNodes, "claim-watch-nodes", 50, "simulated nodes that run the DRA claim reconciler (dra.ClaimWatcher) in the steady state; 0: none")
	flag.IntVar(&o.claimsPer, "claims-per-node", 8, "prepared claims of each of those nodes")
	flag.BoolVar(&o.keep, "keep", false, "keep each run's state directory")
	flag.DurationVar(&o.hold, "hold", 0, "after the set-up, keep the control plane up this long (or until interrupted) for poking at it with its kubeconfig, and measure nothing")
	flag.BoolVar(&o.check, "check", false, "exit 1 when a run breaks a bound that holds on any machine (steady writes, the writers' interval in the storm, aligned claims; make scale-short)")
	flag.Parse()
	for f := range strings.SplitSeq(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scale: -n: %q is not a node count\n", f)
			os.Exit(2)
		}
		o.ns = append(o.ns, n)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	var all []Result
	var failed []string
	for _, n := range o.ns {
		r, err := runOne(ctx, o, n)
		if err != nil {
			return fmt.Errorf("at %d nodes: %w", n, err)
		}
		r.print(os.Stdout)
		all = append(all, r)
		if v := r.violations(); o.check && len(v) > 0 {
			failed = append(failed, fmt.Sprintf("N=%d: %s", n, strings.Join(v, "; ")))
		}
		if o.out != "" {
			if err := writeResults(o.out, all); err != nil {
				return err
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("bounds broken (-check): %s", strings.Join(failed, "; "))
	}
	return nil
}

// writeResults merges rs into the file's results, by run label and N: a run
// of one N replaces the figures of its label and N and keeps the others'.
func writeResults(path string, rs []Result) error {
	var old []Result
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	type key struct {
		run string
		n   int
	}
	byN := map[key]Result{}
	for _, r := range append(old, rs...) {
		byN[key{r.Run, r.N}] = r
	}
	var out []Result
	for _, r := range byN {
		out = append(out, r)
	}
	sortResults(out)
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func runOne(ctx context.Context, o options, n int) (Result, error) {
	r := Result{Run: o.run, N: n, Date: time.Now().UTC().Format(time.RFC3339)}
	dir, err := os.MkdirTemp("", fmt.Sprintf("kube-rdma-scale-%d-", n))
	if err != nil {
		return r, fmt.Errorf("state dir: %w", err)
	}
	if !o.keep {
		defer func() { _ = os.RemoveAll(dir) }()
	}
	slog.Info("control plane", "nodes", n, "dir", dir)
	cp, err := startControlPlane(ctx, o.bin, dir)
	if cp != nil {
		defer cp.stop()
	}
	if err != nil {
		return r, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	c, err := setup(ctx, cp, n, max(1, min(o.bigEvery, n)), o.podsPerNode, o.crds)
	if err != nil {
		return r, fmt.Errorf("setup (logs in %s): %w", filepath.Join(dir, "logs"), err)
	}
	r.SetupS = time.Since(start).Seconds()
	r.BigNodes = len(c.big)
	slog.Info("set up", "took", time.Since(start).Round(time.Second))
	if o.hold > 0 {
		slog.Info("holding", "for", o.hold, "kubeconfig", cp.kubeconfig)
		sleep(ctx, o.hold)
		return r, ctx.Err()
	}
	if err := measureAll(ctx, o, c, &r); err != nil {
		return r, fmt.Errorf("logs in %s: %w", filepath.Join(dir, "logs"), err)
	}
	return r, nil
}

func measureAll(ctx context.Context, o options, c *cluster, r *Result) error {
	var claims *reqcount.Counter
	if o.claimNodes > 0 {
		slog.Info("DRA claim reconcilers", "nodes", min(o.claimNodes, len(c.nodes)), "claimsPerNode", o.claimsPer)
		var err error
		if claims, err = c.claimWatchNodes(ctx, c.cp, o.claimNodes, o.claimsPer); err != nil {
			return err
		}
		r.ClaimWatch = &ClaimWatch{Nodes: min(o.claimNodes, len(c.nodes)), ClaimsPerNode: o.claimsPer, Setup: claims.Counts()}
	}
	// Steady state: nothing changes on any node.
	before, err := c.cp.writes(ctx)
	if err != nil {
		return err
	}
	pubBefore := c.publisherWrites()
	var claimsBefore map[string]int
	if claims != nil {
		claimsBefore = claims.Counts()
	}
	slog.Info("steady state", "for", o.steady)
	start := time.Now()
	sleep(ctx, o.steady)
	after, err := c.cp.writes(ctx)
	if err != nil {
		return err
	}
	if claims != nil {
		r.ClaimWatch.steadyFigures(claimsBefore, claims.Counts(), time.Since(start))
	}
	r.Steady = perNodeMinute(diff(after, before), len(c.nodes), o.steady)
	r.SteadyPublisherWrites = c.publisherWrites() - pubBefore
	if r.SteadyEvents, err = c.eventReasons(ctx, time.Now().Add(-o.steady)); err != nil {
		return err
	}

	if err := c.etcdFigures(ctx, r); err != nil {
		return err
	}
	if r.NotReady, err = c.notReady(ctx); err != nil {
		return err
	}

	slog.Info("port-flap storm", "share", o.stormShare, "for", o.storm)
	before, err = c.cp.writes(ctx)
	if err != nil {
		return err
	}
	pubBefore = c.publisherWrites()
	t0 := time.Now()
	nodes, flaps, err := c.storm(ctx, o.stormShare, o.storm)
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	sleep(ctx, 5*time.Second) // the publishers' last coalesced writes
	after, err = c.cp.writes(ctx)
	if err != nil {
		return err
	}
	r.Storm = Storm{Nodes: nodes, Flaps: flaps, Seconds: time.Since(t0).Seconds(),
		PublisherWrites:       c.publisherWrites() - pubBefore,
		PerFlappingNodeMinute: perNodeMinute(diff(after, before), nodes, time.Since(t0))}

	slog.Info("kubectl timings")
	k := c.cp.bin + "/kubectl"
	r.Kubectl, err = timeCommands(ctx, c.cp.kubeconfig, 3, [][]string{
		{o.kubectlRDMA, "nodes"}, {k, "get", "rdmanodestates"},
		{o.kubectlRDMA, "pods", "-A"}, {k, "get", "pods", "-A"},
	})
	if err != nil {
		return err
	}

	if r.NotReadyAfter, err = c.notReady(ctx); err != nil {
		return err
	}
	// Three runs, each on at most a quarter of the GPUs (8 per node): the
	// pods of a run stay bound, so the last run still finds free GPUs and
	// NICs beside them.
	pods := min(o.schedPods, len(c.nodes)*8/4)
	for _, name := range []string{claimAligned, claimUnaligned, claimPrioritized} {
		slog.Info("DRA scheduling", "claim", name, "pods", pods, "rate", o.schedRate)
		s, err := c.schedule(ctx, name, pods, o.schedRate)
		if err != nil {
			return fmt.Errorf("scheduling %s: %w", name, err)
		}
		r.Sched = append(r.Sched, s)
	}
	return nil
}

func (c *cluster) publisherWrites() int {
	w := 0
	for _, p := range c.pubs {
		w += p.Report().Writes
	}
	return w
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func perNodeMinute(w map[string]float64, nodes int, d time.Duration) map[string]float64 {
	out := map[string]float64{}
	for k, v := range w {
		out[k] = v / float64(nodes) / d.Minutes()
	}
	return out
}
