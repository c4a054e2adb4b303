package suite

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// values are a chart's Helm values; helm merges the files of a release in order.
type values = map[string]any

// phase is one install of the chart: what the tests expect of it, the values it is installed
// with, and its tests, run in order between the install and the uninstall check.
type phase struct {
	name string
	// skip: why the phase cannot run here (its inputs are missing); it skips with this reason.
	skip string
	// config sets what the tests expect over the suite's environment (restored after the phase).
	config func(c *config)
	// setup runs before the node-state snapshot and the install (a stand-in GPU plugin).
	setup func(t *testing.T, e *env)
	// releases: one per node the phase installs the chart for (kind-rxe: one per worker).
	releases []release
	// installed runs after the releases' DaemonSets are ready, before the tests (waits for
	// what a rollout does not show).
	installed func(t *testing.T, e *env)
	// tests run in order after the install; the uninstall check follows them.
	tests []namedTest
	// after runs after the uninstall check passed.
	after func(t *testing.T, e *env)
	// budget: the longest the phase was seen to take, install to uninstall check, on the
	// slowest host it passed on; with E2E_DEADLINE set, a phase with less time left than this
	// is skipped, and says so, instead of running into the deadline (0: never skipped).
	budget time.Duration
	// teardown and testBudgets: with E2E_DEADLINE set and teardown > 0, a test starts only
	// with its budget (its longest time on the slowest host it passed on) plus teardown (the
	// phase's uninstall and checks) left; else it is skipped, and says so: the phase still
	// uninstalls and checks the node before the deadline. Every test of such a phase has one.
	teardown    time.Duration
	testBudgets map[string]time.Duration
}

// deadlineSkip says why p does not start now: E2E_DEADLINE (unix seconds: CI's budget, set by
// .ci/run) leaves less than p.budget; "" when it runs. A phase run into CI's limit fails the
// whole run and keeps nothing it found: skipped, it is named in the report, and `make
// e2e-rxe-cluster` runs it without a deadline.
func deadlineSkip(p phase, deadline string, now time.Time) (string, error) {
	if deadline == "" || p.budget <= 0 {
		return "", nil
	}
	sec, err := strconv.ParseInt(deadline, 10, 64)
	if err != nil || sec <= 0 {
		return "", fmt.Errorf("E2E_DEADLINE %q: want unix seconds", deadline)
	}
	left := time.Unix(sec, 0).Sub(now)
	if left >= p.budget {
		return "", nil
	}
	return fmt.Sprintf("phase %s skipped: %s left before E2E_DEADLINE (CI's time limit), the phase took up to %s on a slow host; run it without the deadline (make e2e-rxe-cluster)",
		p.name, left.Truncate(time.Second), p.budget), nil
}

// testDeadlineSkip says why test of p does not start now: E2E_DEADLINE leaves less than the
// test's budget plus the phase's teardown; "" when it runs (or p has no teardown). Run past the
// deadline, the suite's timeout fails the whole run and keeps nothing it found.
func testDeadlineSkip(p phase, test, deadline string, now time.Time) (string, error) {
	if p.teardown <= 0 {
		return "", nil
	}
	b, ok := p.testBudgets[test]
	if !ok {
		return "", fmt.Errorf("phase %s: test %s has no budget (testBudgets), and the phase has a teardown", p.name, test)
	}
	return deadlineSkip(phase{name: p.name + "'s " + test + " (a test; then the phase's uninstall and checks)", budget: b + p.teardown}, deadline, now)
}

// release is one helm release of a phase, and the node whose state it must leave as it was.
type release struct {
	name string
	node string // "": the node under test
	// moreNodes: other nodes the release runs on whose state it must also leave as it was
	// (rxe-cluster: one release for every node).
	moreNodes []string
	chart     string // "": the working tree's chart (E2E chart); else the chart to install
	values    []values
	// report: the line to append to E2E_REPORT once the release's DaemonSet is ready ("":
	// none); its %s is the seconds from helm install to then.
	report string
	// uninstallTimeout: helm uninstall's --timeout (0: rollout). Its pre-delete hook starts
	// a pod on every node and then a Job's pod: three pod starts in a row.
	uninstallTimeout time.Duration
	// installTimeout: helm install's --timeout (0: 180 s).
	installTimeout time.Duration
}

type namedTest struct {
	name string
	run  func(t *testing.T, e *env)
}

// harness is a cluster the suite knows how to drive, from its node hook's description.
type harness struct {
	node string // the node under test
	// setup runs once before the phases (checks of the chart that install nothing).
	setup  func(t *testing.T, e *env)
	phases []phase
}

// TestCluster runs the phases of the harness the node hook describes (`hook describe`), in
// order: each installs the chart with values built here, runs its tests, uninstalls the
// chart and checks that the node is as it was before the install. A failed phase stops the
// phases after it (the chart may still be installed). -run selects tests as
// TestCluster/<phase>/<test>; a phase that runs always installs, uninstalls and checks.
func TestCluster(t *testing.T) {
	e := need(t)
	d, err := e.describe(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	var h harness
	switch d["harness"] {
	case "local-node":
		h, err = localNode(d)
	case "kind-rxe":
		h, err = kindRXE(d)
	case "rxe-cluster":
		h, err = rxeCluster(d)
		podStartup = 5 * time.Minute
	default:
		err = fmt.Errorf("hook describe: harness %q: want local-node, kind-rxe or rxe-cluster", d["harness"])
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := e.helm.registryChart(d); err != nil {
		t.Fatal(err)
	}
	if err := e.setNode(t.Context(), h.node); err != nil {
		t.Fatal(err)
	}
	e.image = d["test-image"]
	if h.setup != nil {
		h.setup(t, e)
		if t.Failed() {
			return
		}
	}
	for _, p := range h.phases {
		why, err := deadlineSkip(p, os.Getenv("E2E_DEADLINE"), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if why != "" {
			t.Log(why)
			e.appendReport(t, why)
			t.Run(p.name, func(t *testing.T) { t.Skip(why) })
			continue
		}
		if !t.Run(p.name, func(t *testing.T) { e.runPhase(t, p) }) {
			t.Fatalf("phase %s failed: the phases after it do not run", p.name)
		}
	}
}

// runPhase installs the chart for p, runs its tests, then the uninstall check.
func (e *env) runPhase(t *testing.T, p phase) {
	if p.skip != "" {
		t.Skip(p.skip)
	}
	base := e.config
	t.Cleanup(func() { e.config = base })
	if p.config != nil {
		p.config(&e.config)
	}
	if p.setup != nil {
		p.setup(t, e)
		if t.Failed() {
			return
		}
	}
	before := map[string]string{}
	for _, r := range p.releases {
		for _, node := range e.releaseNodes(r) {
			s, err := e.nodeState(t.Context(), node)
			if err != nil {
				t.Fatal(err)
			}
			before[node] = s
		}
	}
	// Stops once the phase has ended: after the uninstall check, so a daemon's last lines are in.
	t.Cleanup(e.followPodLogs(t, p.name, os.Getenv("E2E_POD_LOGS")))
	for _, r := range p.releases {
		e.install(t, p.name, r)
	}
	if p.installed != nil {
		p.installed(t, e)
	}
	for _, tc := range p.tests {
		why, err := testDeadlineSkip(p, tc.name, os.Getenv("E2E_DEADLINE"), time.Now())
		if err != nil {
			t.Error(err)
			break
		}
		if why != "" {
			e.appendReport(t, why)
			t.Run(tc.name, func(t *testing.T) { t.Skip(why) })
			continue
		}
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
	// Not a subtest: -run may leave out any test, never the uninstall.
	e.uninstall(t, p.releases, before)
	if p.after != nil {
		p.after(t, e)
	}
}

// chartDir is the repository's chart: go test runs a test binary in its package's directory.
func chartDir() (string, error) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy", "helm", "kube-rdma"))
	if err != nil {
		return "", fmt.Errorf("the chart: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("the chart: %w", err)
	}
	return dir, nil
}

// writeValues writes each of vs as YAML into dir and returns helm's -f arguments.
func writeValues(dir, prefix string, vs []values) ([]string, error) {
	var args []string
	for i, v := range vs {
		b, err := yaml.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal helm values: %w", err)
		}
		f := filepath.Join(dir, fmt.Sprintf("%s.%d.yaml", prefix, i))
		if err := os.WriteFile(f, b, 0o644); err != nil {
			return nil, fmt.Errorf("write helm values: %w", err)
		}
		args = append(args, "-f", f)
	}
	return args, nil
}

// install runs helm install of r and waits until its DaemonSet has rolled out.
func (e *env) install(t *testing.T, phase string, r release) {
	t.Helper()
	vs := r.values
	if r.chart == "" {
		vs = append(slices.Clone(vs), drainValues())
	}
	args, err := writeValues(t.TempDir(), "values-"+phase, vs)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	args = append(append([]string{"install", r.name}, e.helm.chartRef(orDefault(r.chart, e.helm.chart))...),
		append([]string{"--create-namespace", "--wait", "--timeout", cmp.Or(r.installTimeout, 180*time.Second).String()}, args...)...)
	if _, err := e.runHelm(t.Context(), args...); err != nil {
		t.Logf("the release's pods after %s:\n%s", time.Since(start).Round(time.Second), e.describePods(e.helm.namespace))
		t.Fatal(err)
	}
	// helm's --wait can pass a DaemonSet whose status the controller has not filled in yet.
	dss := e.apps.DaemonSets(e.helm.namespace)
	err = eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		list, err := dss.List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.name})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("release %s has %d DaemonSets, want 1", r.name, len(list.Items))
		}
		return rolledOut(&list.Items[0], list.Items[0].Generation)
	})
	if err != nil {
		t.Fatal(err)
	}
	took := fmt.Sprintf("%.1f", time.Since(start).Seconds())
	t.Logf("helm install %s (phase %s): DaemonSet ready %s s after", r.name, phase, took)
	if r.report != "" {
		e.appendReport(t, fmt.Sprintf(r.report, took))
	}
}

// uninstall runs helm uninstall of every release, then waits until each node's `hook
// node-state` is what it was before the install.
func (e *env) uninstall(t *testing.T, releases []release, before map[string]string) {
	t.Helper()
	// The releases at once: each one's uninstall hook runs on its own nodes (a pod start there
	// can take a minute under emulation), so one after the other costs their sum.
	undrain := e.drainForUninstall(t, releases)
	errs := make([]error, len(releases))
	took := make([]time.Duration, len(releases))
	var wg sync.WaitGroup
	for i, r := range releases {
		wg.Go(func() {
			start := time.Now()
			_, errs[i] = e.runHelm(t.Context(), "uninstall", r.name, "--wait", "--timeout", cmp.Or(r.uninstallTimeout, rollout).String())
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	undrain()
	for i, r := range releases {
		if errs[i] != nil {
			t.Logf("the release's pods (its uninstall hook's too) after %s:\n%s", took[i].Round(time.Second),
				e.describePods(e.helm.namespace))
			t.Fatalf("helm uninstall %s: %v", r.name, errs[i])
		}
		t.Logf("helm uninstall %s returned after %s", r.name, took[i].Round(100*time.Millisecond))
	}
	start := time.Now()
	for _, r := range releases {
		nodes := e.releaseNodes(r)
		for _, node := range nodes {
			want := before[node]
			// The daemons' grace after SIGTERM (devicePlugin.terminationGracePeriodSeconds,
			// 120 s in the rxe-cluster guests) and a minute for the pods to stop.
			if diff, err := e.waitNodeStateOn(t.Context(), node, want, uninstallWait(r)); err != nil {
				t.Logf("the daemons' last lines (E2E_POD_LOGS):\n%s", tailPodLogs(os.Getenv("E2E_POD_LOGS"), "device-plugin", 25))
				t.Fatalf("after helm uninstall: node %s: %v; node-state (-before helm install +now):\n%s", node, err, diff)
			}
			line := fmt.Sprintf("helm uninstall left nothing: hook node-state (%d lines: CNI binary, CNI configs, CDI specs, sockets, pools file) equal to before helm install %s after it returned",
				strings.Count(want, "\n"), time.Since(start).Round(time.Millisecond))
			if len(releases) > 1 || len(nodes) > 1 {
				line = "node " + node + ": " + line
			}
			t.Log(line)
			e.appendReport(t, line)
		}
	}
}

// describePods is a line per pod of namespace ns: node, phase, whether it is being deleted,
// and each container's state; it says so when the list fails.
func (e *env) describePods(ns string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := e.core.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "  (list: " + err.Error() + ")"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "  %s on %s: %s, created %s ago", p.Name, p.Spec.NodeName, p.Status.Phase,
			time.Since(p.CreationTimestamp.Time).Round(time.Second))
		if p.DeletionTimestamp != nil {
			fmt.Fprintf(&b, ", deleted %s ago", time.Since(p.DeletionTimestamp.Time).Round(time.Second))
		}
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			switch st := c.State; {
			case st.Running != nil:
				fmt.Fprintf(&b, "; %s running since %s", c.Name, st.Running.StartedAt.Format(time.TimeOnly))
			case st.Terminated != nil:
				fmt.Fprintf(&b, "; %s exited %d at %s", c.Name, st.Terminated.ExitCode, st.Terminated.FinishedAt.Format(time.TimeOnly))
			case st.Waiting != nil:
				fmt.Fprintf(&b, "; %s waiting (%s)", c.Name, st.Waiting.Reason)
			}
		}
		b.WriteString("\n")
	}
	if len(pods.Items) == 0 {
		b.WriteString("  (none)\n")
	}
	return b.String()
}

// uninstallWait is how long a node of r may take to be as it was before helm install, after
// helm uninstall returned: a minute more than the daemons' grace after SIGTERM (the values'
// devicePlugin.terminationGracePeriodSeconds, the chart's 30 s without), and at least the two
// minutes of waitNodeStateIs.
func uninstallWait(r release) time.Duration {
	grace := 30
	for _, v := range r.values { // later values files win, as in helm
		if dp, ok := v["devicePlugin"].(values); ok {
			if g, ok := dp["terminationGracePeriodSeconds"].(int); ok {
				grace = g
			}
		}
	}
	return max(2*time.Minute, time.Duration(grace)*time.Second+time.Minute)
}

// releaseNodes are the nodes whose state r must leave as it was: its node (the node under
// test when it names none), then its moreNodes.
func (e *env) releaseNodes(r release) []string {
	return append([]string{orDefault(r.node, e.node)}, r.moreNodes...)
}

// nodeState is `hook node-state` of node ("": the hook's default, the node under test).
func (e *env) nodeState(ctx context.Context, node string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return runHookOn(ctx, e.hook, node, "node-state")
}

// waitNodeStateIs waits up to two minutes until the node under test's `hook node-state` prints
// want; on timeout it returns the last difference (-want +now). A node whose files stay
// different that long keeps them: the pods that remove them are gone by then. (One minute was
// too short for the soft-RoCE guests on a slow host: the uninstall's pods started 1-2 min
// late, and a node was clean 54 s after helm uninstall returned.)
func (e *env) waitNodeStateIs(ctx context.Context, want string) (string, error) {
	return e.waitNodeStateOn(ctx, e.node, want, 2*time.Minute)
}

// waitNodeStateOn is waitNodeStateIs for node, waiting up to limit.
func (e *env) waitNodeStateOn(ctx context.Context, node, want string, limit time.Duration) (string, error) {
	var diff string
	err := eventually(ctx, limit, func(ctx context.Context) error {
		now, err := e.nodeState(ctx, node)
		if err != nil {
			return err
		}
		if diff = sameLines(want, now); diff != "" {
			return fmt.Errorf("node state differs")
		}
		return nil
	})
	return diff, err
}

// describe is `hook describe` of node ("": the hook's default): "key value" lines saying
// what the harness provisioned.
func (e *env) describe(ctx context.Context, node string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := runHookOn(ctx, e.hook, node, "describe")
	if err != nil {
		return nil, err
	}
	d := parseDescription(out)
	for _, k := range []string{"harness", "test-image"} {
		if d[k] == "" {
			return nil, fmt.Errorf("hook describe: no %s in\n%s", k, out)
		}
	}
	return d, nil
}

// parseDescription parses "key value" lines; a value may hold spaces.
func parseDescription(out string) map[string]string {
	d := map[string]string{}
	for l := range strings.SplitSeq(out, "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		k, v, _ := strings.Cut(l, " ")
		d[k] = strings.TrimSpace(v)
	}
	return d
}
