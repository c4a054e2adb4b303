package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// faultsConfig is what the faults phase tears, plants and rewrites on the node: its tests
// run on the node's own host (the local-node harness), as root, and reach these paths
// directly; the processes they stop go through the hook (apiserver, restart-kubelet).
type faultsConfig struct {
	cniState string // the CNI plugin's stateDir (attachment records)
	rdmaIPAM string // host-local's dataDir of the chained entry
	conflist string // the node's primary conflist, which cni-chain chains kube-rdma into
	cniBin   string // the installed CNI plugin
	// cniE2EBinary: the CNI plugin built with kuberdma_e2e, whose fault hook parks an ADD
	// (pkg/cni/park_e2e.go) and whose fake RDMA netlink stops answering while rdmaDownFile
	// exists (internal/fakerdma); "": the harness has none.
	cniE2EBinary string
	// claims: the DRA front end's claim records (--dra-plugin-dir, then claims/); "": the
	// phase serves no DRA pool. claimPool: the dra pool whose claims its DRA faults use.
	claims, claimPool string
	// allocDir: the device plugin's alloc dir (pool files); "": the phase has no gpuAligned pool.
	allocDir string
	// poolsFile: the node's pools file the daemon writes and the CNI plugin reads; "": none.
	poolsFile string
	// draMemlock: the claim pool's memlock in bytes, which the NRI plugin sets on its claims'
	// containers; "": the phase has no NRI or sets none.
	draMemlock string
	// kubeletRoot: the kubelet's --root-dir (pods' volumes under pods/<uid>/volumes); "": not
	// reached.
	kubeletRoot string
	// phase names the phase in the report's lines.
	phase string
}

// needFaults returns the phase's faults configuration or skips t.
func (e *env) needFaults(t *testing.T) *faultsConfig {
	t.Helper()
	if e.faults == nil || e.chainedPool == "" {
		t.Skip("the phase names no faults configuration or no chained pool")
	}
	return e.faults
}

// fault is one fault of the phase and the state its invariant check compares against.
type fault struct {
	e       *env
	name    string
	ns      string
	base    nodeListing
	watched []*watchedPod
	created []loadPod // pods created around the fault, checked and deleted by check
	healed  time.Time // when the fault was over (the process back, the file written)
	// baseClaims: the claim records dir's entries before the fault (DRA phases).
	baseClaims []string
}

// beginFault waits until every device is allocatable, takes the node's links, records and
// leases, and starts a watched pod of each of pools (the pools of the phase when none).
func (e *env) beginFault(t *testing.T, name string, pools ...string) *fault {
	t.Helper()
	f := e.newFault(t, name)
	if len(pools) == 0 {
		for _, p := range e.pools {
			pools = append(pools, p.name)
		}
	}
	for _, name := range pools {
		p := e.pool(name)
		if p == nil || p.count == 0 {
			t.Fatalf("no pool %s in the phase", name)
		}
		f.watched = append(f.watched, e.startWatchedPodOf(t, f.ns, *p))
	}
	return f
}

// newFault is a fault in a new namespace, begun once every pool is allocatable, with
// the node's listing and its claim records taken as the base.
func (e *env) newFault(t *testing.T, name string) *fault {
	t.Helper()
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatalf("before the fault: %v", err)
	}
	base, err := e.listing(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	f := &fault{e: e, name: name, ns: e.namespace(t), base: base}
	if e.faults.claims != "" {
		if f.baseClaims, err = e.faults.claimFiles(); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// beginFaultOf is beginFault for pods of load kinds (a DRA pool's claim): it makes what
// their pods need in the fault's namespace and starts a watched pod of each kind.
func (e *env) beginFaultOf(t *testing.T, name string, kinds ...loadKind) *fault {
	t.Helper()
	f := e.newFault(t, name)
	for _, k := range kinds {
		f.watched = append(f.watched, e.startWatchedKind(t, f.ns, k))
	}
	return f
}

// create creates a pod with one device of pool; its outcome is checked by check.
func (f *fault) create(ctx context.Context, name, pool string) error {
	pl := f.e.pool(pool)
	if pl == nil {
		return fmt.Errorf("no pool %s in the phase", pool)
	}
	return f.createKind(ctx, name, f.e.poolKind(*pl))
}

// createKind creates a pod of kind k (what it needs made in the namespace already: a
// watched pod of k, beginFaultOf); its outcome is checked by check.
func (f *fault) createKind(ctx context.Context, name string, k loadKind) error {
	p := loadPod{name: name, kind: k, at: time.Now()}
	_, p.err = f.e.core.Pods(f.ns).Create(ctx, k.pod(f.ns, name), metav1.CreateOptions{})
	f.created = append(f.created, p)
	return p.err
}

// faultOutcome is what check found, for the report.
type faultOutcome struct {
	ran, loud int           // created pods that ran with everything, failed loudly
	converged time.Duration // from healed to every created pod settled and every device allocatable
}

// check is the invariant every fault ends with. Every watched pod still runs its first
// container (0 restarts) with its devices and netdev. Every created pod either ran with
// everything it asked for (device nodes, env, the chained pool's netdev) or failed loudly:
// not running, with a Warning Event or a Failed phase naming why; none ran without
// something, none is stuck without a word. Every attachment record belongs to a live pod
// (its namespace, name and UID), every claim record a claim that exists with its UID. Then
// every pod is deleted, after which the node's links, records and leases, its claim records
// and the cluster's ResourceClaims are as before the fault and every device is allocatable
// again.
func (f *fault) check(t *testing.T) faultOutcome {
	t.Helper()
	e := f.e
	if f.healed.IsZero() {
		f.healed = time.Now()
	}
	var out faultOutcome
	for _, w := range f.watched {
		w.checkIntact(t)
	}
	names := []string{}
	for _, w := range f.watched {
		names = append(names, w.name)
	}
	for _, p := range f.created {
		if p.err != nil {
			t.Errorf("%s: create pod %s: %v", f.name, p.name, p.err)
			continue
		}
		names = append(names, p.name)
		ran, problems := e.loadPodProblems(t.Context(), f.ns, p.name, p.kind)
		switch {
		case problems == nil:
			out.ran++
		case ran:
			e.dumpPod(t, f.ns, p.name)
			t.Errorf("%s: pod %s (pool %s) ran without something it asked for: %s", f.name, p.name, p.kind.name, strings.Join(problems, "; "))
		default:
			why, err := e.loudly(t.Context(), f.ns, p.name)
			if err != nil {
				t.Fatal(err)
			}
			if why == "" {
				e.dumpPod(t, f.ns, p.name)
				t.Errorf("%s: pod %s (pool %s) did not run and nothing says why: %s", f.name, p.name, p.kind.name, strings.Join(problems, "; "))
				continue
			}
			out.loud++
			t.Logf("%s: pod %s (pool %s) did not get its devices, loudly: %s", f.name, p.name, p.kind.name, why)
		}
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Errorf("%s: with the pods running: %v", f.name, err)
	}
	out.converged = time.Since(f.healed)
	if err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error { return e.recordsOfLivePods(ctx) }); err != nil {
		t.Errorf("%s: %v", f.name, err)
	}
	if e.faults.claims != "" {
		if err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error { return e.claimRecordsOfLiveClaims(ctx) }); err != nil {
			t.Errorf("%s: %v", f.name, err)
		}
	}
	e.deleteParallel(t, f.ns, names)
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		now, err := e.listing(ctx)
		if err != nil {
			return err
		}
		var diffs []string
		for _, verb := range listingVerbs {
			if d := cmp.Diff(f.base[verb], now[verb]); d != "" {
				diffs = append(diffs, fmt.Sprintf("%s: left %v, missing %v", verb, minus(now[verb], f.base[verb]), minus(f.base[verb], now[verb])))
			}
		}
		if e.faults.claims != "" {
			files, err := e.faults.claimFiles()
			if err != nil {
				return err
			}
			if d := cmp.Diff(f.baseClaims, files); d != "" {
				diffs = append(diffs, fmt.Sprintf("claim records: left %v, missing %v", minus(files, f.baseClaims), minus(f.baseClaims, files)))
			}
		}
		if diffs != nil {
			return errors.New("after every pod is gone, the node's " + strings.Join(diffs, "; "))
		}
		return e.claimsLeft(ctx)
	})
	if err != nil {
		t.Errorf("%s: %v", f.name, err)
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Errorf("%s: after every pod is gone: %v", f.name, err)
	}
	return out
}

// report appends the fault's line to the report: what happened, the pods and the figures.
func (f *fault) report(t *testing.T, what string, out faultOutcome) {
	t.Helper()
	status := "invariant held"
	if t.Failed() {
		status = "INVARIANT BROKEN"
	}
	phase, claims := f.e.faults.phase, ""
	if f.e.faults.claims != "" {
		claims = ", no claim record or ResourceClaim left"
	}
	line := fmt.Sprintf("%s, %s: %s; %d watched pods intact, %d pods created around it: %d ran with everything, %d failed loudly; settled %.1f s after the fault ended; %s: no record, link or lease left%s, every device allocatable",
		phase, f.name, what, len(f.watched), len(f.created), out.ran, out.loud, out.converged.Seconds(), status, claims)
	t.Log(line)
	f.e.appendReport(t, line)
}

// loudly returns why a pod that did not run says so: a Warning Event about it (not the
// node's lack of cluster DNS) or its Failed phase's reason; "" when nothing says why.
func (e *env) loudly(ctx context.Context, ns, name string) (string, error) {
	pod, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("get pod %s: %w", name, err)
	}
	if pod.Status.Phase == corev1.PodFailed {
		return fmt.Sprintf("phase Failed, reason %s: %.200s", pod.Status.Reason, pod.Status.Message), nil
	}
	ev, err := e.core.Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", fmt.Errorf("list events: %w", err)
	}
	for _, v := range ev.Items {
		if v.Type == corev1.EventTypeWarning && v.InvolvedObject.Name == name && v.Reason != "MissingClusterDNS" {
			return fmt.Sprintf("Warning %s: %.200s", v.Reason, v.Message), nil
		}
	}
	return "", nil
}

// records reads the attachment records of the CNI plugin's state dir, by file name (none
// when the phase names no state dir: no CNI).
func (c *faultsConfig) records() (map[string]attachment.Attachment, error) {
	if c.cniState == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(c.cniState)
	if err != nil {
		return nil, fmt.Errorf("read the CNI state dir: %w", err)
	}
	out := map[string]attachment.Attachment{}
	for _, d := range ents {
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c.cniState, d.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed by a DEL meanwhile
		}
		if err != nil {
			return nil, err
		}
		var a attachment.Attachment
		if err := json.Unmarshal(b, &a); err != nil {
			return nil, fmt.Errorf("attachment record %s: %w", d.Name(), err)
		}
		out[d.Name()] = a
	}
	return out, nil
}

// recordOf waits for the attachment record of pod ns/name and returns its file name.
func (c *faultsConfig) recordOf(ctx context.Context, ns, name string) (string, attachment.Attachment, error) {
	var file string
	var rec attachment.Attachment
	err := eventually(ctx, 30*time.Second, func(context.Context) error {
		recs, err := c.records()
		if err != nil {
			return err
		}
		for f, a := range recs {
			if a.Pod != nil && a.Pod.Namespace == ns && a.Pod.Name == name && a.Complete {
				file, rec = f, a
				return nil
			}
		}
		return fmt.Errorf("no complete attachment record of pod %s/%s among %d", ns, name, len(recs))
	})
	return file, rec, err
}

// recordsOfLivePods checks that every attachment record names a pod that exists with its
// UID and is not over.
func (e *env) recordsOfLivePods(ctx context.Context) error {
	recs, err := e.faults.records()
	if err != nil {
		return err
	}
	var bad []string
	for f, a := range recs {
		if a.Pod == nil {
			bad = append(bad, f+" (no pod)")
			continue
		}
		p, err := e.core.Pods(a.Pod.Namespace).Get(ctx, a.Pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			bad = append(bad, fmt.Sprintf("%s (pod %s/%s gone)", f, a.Pod.Namespace, a.Pod.Name))
		case err != nil:
			return err
		case a.Pod.UID != "" && string(p.UID) != a.Pod.UID:
			bad = append(bad, fmt.Sprintf("%s (pod %s/%s re-created)", f, a.Pod.Namespace, a.Pod.Name))
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			bad = append(bad, fmt.Sprintf("%s (pod %s/%s %s)", f, a.Pod.Namespace, a.Pod.Name, p.Status.Phase))
		}
	}
	if bad != nil {
		return fmt.Errorf("attachment records without a live pod: %s", strings.Join(bad, ", "))
	}
	return nil
}

// metric is the value of one sample of the daemon's /metrics, named with its labels as
// the exposition writes them (name{k="v"}); found is false when there is no such line.
func (e *env) metric(ctx context.Context, sample string) (v float64, found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.daemonMetrics, nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", e.daemonMetrics, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, fmt.Errorf("scrape %s: %w", e.daemonMetrics, err)
	}
	for l := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, true, err
		}
	}
	return 0, false, nil
}

// killDaemon sends SIGKILL to the node agent's process (`device-plugin run`, the chart's
// daemon container) and returns how many it killed.
func killDaemon() (int, error) { return signalDaemon(syscall.SIGKILL) }

// signalDaemon sends sig to the node agent's process (`device-plugin run`).
func signalDaemon(sig syscall.Signal) (int, error) {
	return signalProcs(sig, "device-plugin run", func(args []string) bool {
		return len(args) >= 2 && args[0] == "/usr/local/bin/device-plugin" && args[1] == "run"
	})
}

// signalChainer sends sig to the chart's cni-chain container (`kube-rdma install --watch`),
// which keeps the kube-rdma entry in the node's conflist.
func signalChainer(sig syscall.Signal) (int, error) {
	return signalProcs(sig, "kube-rdma install --watch", func(args []string) bool {
		return len(args) >= 2 && args[0] == "/usr/local/bin/kube-rdma" && args[1] == "install" && slices.Contains(args, "--watch")
	})
}

// signalProcs sends sig to every process of this host whose command line match takes and
// returns how many; none is an error naming what.
func signalProcs(sig syscall.Signal, what string, match func(args []string) bool) (int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if !match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil {
			return n, fmt.Errorf("kill -%d %d (%s): %w", sig, pid, what, err)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no %s process on this host", what)
	}
	return n, nil
}

// daemonRestarts is the sum of the restart counts of the release's pods' containers.
func (e *env) daemonRestarts(ctx context.Context) (int32, error) {
	ds, err := e.releaseDaemonSet(ctx)
	if err != nil {
		return 0, err
	}
	pods, err := e.core.Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		return 0, fmt.Errorf("list the daemon's pods: %w", err)
	}
	var n int32
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			n += c.RestartCount
		}
	}
	return n, nil
}

// waitQuarantined waits until exactly one file matches glob (a quarantine dir's copies of one
// file) and holds want, the torn bytes, and returns its path.
func waitQuarantined(ctx context.Context, glob string, want []byte) (string, error) {
	var moved string
	err := eventually(ctx, time.Minute, func(context.Context) error {
		qs, err := filepath.Glob(glob)
		if err != nil || len(qs) != 1 {
			return fmt.Errorf("%s: %v %v", glob, qs, err)
		}
		b, err := os.ReadFile(qs[0])
		if err != nil {
			return err
		}
		if !bytes.Equal(b, want) {
			return fmt.Errorf("%s does not hold the torn bytes", qs[0])
		}
		moved = qs[0]
		return nil
	})
	return moved, err
}

// waitWrittenAgain waits until the file at path holds want again.
func waitWrittenAgain(ctx context.Context, path string, want []byte) error {
	return eventually(ctx, time.Minute, func(context.Context) error {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s is not back: %w", path, err)
		}
		if !bytes.Equal(b, want) {
			return fmt.Errorf("%s is back but not as it was:\n%s\nwant\n%s", path, b, want)
		}
		return nil
	})
}

// waitGauge waits until the daemon's /metrics has sample at 1 or more and returns its value.
func (e *env) waitGauge(ctx context.Context, sample string) (float64, error) {
	var v float64
	err := eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		got, found, err := e.metric(ctx, sample)
		if err != nil || !found || got < 1 {
			return fmt.Errorf("%s = %v (found %v): %v", sample, got, found, err)
		}
		v = got
		return nil
	})
	return v, err
}

// removeQuarantined is the operator's part once a quarantined copy was looked at: it goes,
// and its quarantine dir when empty, so the node's listing is as before the fault.
func removeQuarantined(t *testing.T, moved string) {
	t.Helper()
	if err := os.Remove(moved); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Dir(moved))
}
