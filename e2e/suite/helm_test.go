package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	extraPool    = "e2e-extra"
	defaultSlots = 100 // config.DefaultSlots: a shared pool's slots when unset
	maxSlots     = 10000
	rollout      = 5 * time.Minute
)

// testDaemonSetRestartAndHelmUpgrade: restarting the DaemonSet, changing a
// pool with helm upgrade and changing it back leave a running pod's
// container, devices and netdevs alone; the change shows on the node.
func testDaemonSetRestartAndHelmUpgrade(t *testing.T, e *env) {
	e.needHelm(t)
	ns := e.namespace(t)
	w := e.startWatchedPod(t, ns)
	e.restartDaemonSet(t)
	if err := e.waitAllocatable(t.Context(), 90*time.Second, e.counts()); err != nil {
		t.Fatalf("after the DaemonSet restart: %v", err)
	}
	w.checkIntact(t)
	e.upgradeAndRestore(t)
	w.checkIntact(t)
}

func (e *env) needHelm(t *testing.T) {
	t.Helper()
	h := e.helm
	if h.bin == "" || h.release == "" || h.namespace == "" || h.chart == "" {
		t.Skip("E2E_HELM, E2E_HELM_RELEASE, E2E_HELM_NAMESPACE and E2E_CHART: all four are needed")
	}
}

// runHelm runs helm with the release's namespace and returns its stdout.
func (e *env) runHelm(ctx context.Context, args ...string) ([]byte, error) {
	args = append(args, "--namespace", e.helm.namespace, "--kubeconfig", os.Getenv("E2E_KUBECONFIG"))
	cmd := exec.CommandContext(ctx, e.helm.bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// restartDaemonSet restarts the release's DaemonSet as `kubectl rollout
// restart` does and waits for the rollout and, with the node hook, until the
// node shows what it showed before (hook node-state: the sockets back). The
// CNI binary, its node file and the conflist entry stay all along: the node
// is sampled during the rollout and any sample whose cni-* lines differ from
// before fails the test (were the old pod's cni-chain to take the entry out
// when it stops, a sandbox created before the new pod put it back would get
// no RDMA netdev).
func (e *env) restartDaemonSet(t *testing.T) {
	t.Helper()
	var before string
	stopSampling := func() (int, string) { return 0, "" }
	if e.hook != "" {
		before = e.mustHook(t, 30*time.Second, "node-state")
		stopSampling = e.sampleCNIFiles(t.Context(), before)
		defer func() { _, _ = stopSampling() }()
	}
	dss := e.apps.DaemonSets(e.helm.namespace)
	list, err := dss.List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + e.helm.release})
	if err != nil {
		t.Fatalf("list DaemonSets of release %s: %v", e.helm.release, err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("release %s has %d DaemonSets in %s, want 1", e.helm.release, len(list.Items), e.helm.namespace)
	}
	name := list.Items[0].Name
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`,
		time.Now().Format(time.RFC3339))
	ds, err := dss.Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("restart DaemonSet %s: %v", name, err)
	}
	gen := ds.Generation
	start := time.Now()
	err = eventually(t.Context(), rollout, func(ctx context.Context) error {
		ds, err := dss.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return rolledOut(ds, gen)
	})
	if err != nil {
		t.Fatalf("DaemonSet %s: %v", name, err)
	}
	t.Logf("DaemonSet %s rolled out in %s", name, time.Since(start).Round(time.Millisecond))
	if before == "" {
		return
	}
	samples, diff := stopSampling()
	if diff != "" {
		t.Fatalf("the CNI files changed during the DaemonSet restart (-before +during):\n%s", diff)
	}
	t.Logf("CNI binary, node file and conflist entry unchanged in %d samples during the rollout", samples)
	if diff, err := e.waitNodeStateIs(t.Context(), before); err != nil {
		t.Fatalf("after the DaemonSet restart: %v; node-state (-before the restart +now):\n%s", err, diff)
	}
	t.Logf("node state as before the restart %s after it began", time.Since(start).Round(time.Millisecond))
}

// sampleCNIFiles samples the node's cni-* lines of `hook node-state` until
// stop is called, which returns the number of samples and the first
// difference from before (-before +sample), "" if none.
func (e *env) sampleCNIFiles(ctx context.Context, before string) (stop func() (int, string)) {
	return e.sampleNodeState(ctx, before, func(line string) string {
		if strings.HasPrefix(line, "cni-") {
			return line
		}
		return ""
	})
}

// sampleNodeState samples `hook node-state` until stop is called, each sample's lines passed
// through keep (which returns what of a line to compare, "" to leave it out), and returns
// the number of samples and the first difference from before (-before +sample), "" if none.
func (e *env) sampleNodeState(ctx context.Context, before string, keep func(line string) string) (stop func() (int, string)) {
	cniLines := func(s string) string {
		var l []string
		for line := range strings.SplitSeq(s, "\n") {
			if k := keep(line); k != "" {
				l = append(l, k)
			}
		}
		return strings.Join(l, "\n")
	}
	want := cniLines(before)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var n int
	var diff string
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			got, err := e.nodeState(ctx, "")
			if err == nil {
				n++
				if d := sameLines(want, cniLines(got)); d != "" && diff == "" {
					diff = d
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() (int, string) {
		once.Do(func() { cancel(); <-done })
		return n, diff
	}
}

// rolledOut says why ds has not finished rolling out generation gen.
func rolledOut(ds *appsv1.DaemonSet, gen int64) error {
	s := ds.Status
	if s.ObservedGeneration < gen || s.DesiredNumberScheduled == 0 || s.UpdatedNumberScheduled != s.DesiredNumberScheduled ||
		s.NumberReady != s.DesiredNumberScheduled || s.NumberAvailable != s.DesiredNumberScheduled {
		return fmt.Errorf("DaemonSet %s generation %d: observed %d, desired %d, updated %d, ready %d, available %d",
			ds.Name, gen, s.ObservedGeneration, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberReady, s.NumberAvailable)
	}
	return nil
}

// helmValues returns the release's values: user-supplied, or all of them.
func (e *env) helmValues(t *testing.T, all bool) map[string]any {
	t.Helper()
	args := []string{"get", "values", e.helm.release, "-o", "json"}
	if all {
		args = append(args, "--all")
	}
	out, err := e.runHelm(t.Context(), args...)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any // helm prints null when there are none
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("helm get values: %v", err)
	}
	if v == nil {
		v = map[string]any{}
	}
	return v
}

// upgradeAndRestore changes one pool with helm upgrade, sees the change on the
// node, and upgrades back to the release's own values.
func (e *env) upgradeAndRestore(t *testing.T) {
	user := e.helmValues(t, false)
	ch, err := planChange(e.helmValues(t, true), user, e.pools, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	changed, original := filepath.Join(dir, "changed.json"), filepath.Join(dir, "original.json")
	for file, v := range map[string]map[string]any{changed: ch.values, original: user} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	restored := false
	t.Cleanup(func() {
		if !restored {
			ctx, cancel := context.WithTimeout(context.Background(), rollout)
			defer cancel()
			if err := e.upgrade(ctx, original); err != nil {
				t.Errorf("restore the release's values: %v", err)
			}
		}
	})
	t.Logf("helm upgrade: %s", ch.what)
	if err := e.upgrade(t.Context(), changed); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.observe(t.Context(), ch); err != nil {
		t.Fatalf("after helm upgrade (%s): %v", ch.what, err)
	}
	t.Logf("the change showed on the node %s after helm upgrade returned", time.Since(start).Round(time.Millisecond))
	err = e.upgrade(t.Context(), original)
	restored = err == nil
	if err != nil {
		t.Fatal(err)
	}
	if err := e.waitAllocatable(t.Context(), 3*time.Minute, e.counts()); err != nil {
		t.Fatalf("after helm upgrade back to the release's values: %v", err)
	}
}

// upgrade runs helm upgrade with the chart's defaults and the values file
// (--reset-values: nothing of the previous revision is reused).
func (e *env) upgrade(ctx context.Context, values string) error {
	args := append([]string{"upgrade", e.helm.release}, e.helm.chartRef(e.helm.chart)...)
	_, err := e.runHelm(ctx, append(args, "--reset-values", "-f", values, "--wait", "--timeout", rollout.String())...)
	return err
}

// valuesChange is a pool change made with helm upgrade and how it shows.
type valuesChange struct {
	what   string
	values map[string]any // the user values to upgrade with
	// Either the node's allocatable per pool, or a pool that must appear in its
	// capacity (a pool with no device is listed with 0).
	allocatable map[string]int64
	inCapacity  string
}

// observe waits until the change shows on the node. ConfigMap updates reach a
// pod's volume within the kubelet's sync period, about a minute.
func (e *env) observe(ctx context.Context, ch valuesChange) error {
	if ch.allocatable != nil {
		return e.waitAllocatable(ctx, 3*time.Minute, ch.allocatable)
	}
	return eventually(ctx, 3*time.Minute, func(ctx context.Context) error {
		got, err := e.nodeResources(ctx, true, ch.inCapacity)
		if err != nil {
			return err
		}
		if got[ch.inCapacity] < 0 {
			return fmt.Errorf("node %s capacity has no %s", e.node, e.resource(ch.inCapacity))
		}
		return nil
	})
}

// planChange picks an observable change: the slots of a shared pool that
// the phase expects devices in (its allocatable follows: devices x slots), else
// a new shared pool e2e-extra that selects no device (shared pools may overlap
// anything, so the daemon accepts it whatever the exclusive pools select).
func planChange(all, user map[string]any, pools []pool, prefix string) (valuesChange, error) {
	var cfg map[string]any
	if err := roundTrip(all["config"], &cfg); err != nil || cfg == nil {
		return valuesChange{}, fmt.Errorf("helm values: no config (%v)", err)
	}
	if p, _ := cfg["resourcePrefix"].(string); p != prefix {
		return valuesChange{}, fmt.Errorf("helm values: config.resourcePrefix %q, the suite's prefix %q", p, prefix)
	}
	list, _ := cfg["pools"].([]any)
	values := map[string]any{}
	for k, v := range user {
		values[k] = v
	}
	values["config"] = cfg
	for _, item := range list {
		m, _ := item.(map[string]any)
		name, _ := m["name"].(string)
		if name == extraPool {
			return valuesChange{}, fmt.Errorf("helm values already have a pool %s", extraPool)
		}
		ep := poolOf(pools, name)
		if m["mode"] != "shared" || ep == nil || ep.mode != "shared" || ep.count == 0 {
			continue
		}
		slots := int64(defaultSlots)
		if v, ok := m["slots"].(float64); ok && v > 0 {
			slots = int64(v)
		}
		newSlots := slots + 1
		if newSlots > maxSlots {
			newSlots = slots - 1
		}
		if ep.count%slots != 0 || newSlots < 1 {
			continue
		}
		m["slots"] = newSlots
		want := map[string]int64{}
		for _, p := range pools {
			want[p.name] = p.count
		}
		want[name] = ep.count / slots * newSlots
		return valuesChange{what: fmt.Sprintf("shared pool %s: slots %d -> %d", name, slots, newSlots),
			values: values, allocatable: want}, nil
	}
	// nccl: false: the configuration allows one pool that sets NCCL's variables.
	cfg["pools"] = append(list, map[string]any{"name": extraPool, "mode": "shared", "slots": 1, "nccl": false,
		"selectors": map[string]any{"rdmaDevices": []any{"e2e-nonexistent"}}})
	return valuesChange{what: "new shared pool " + extraPool + " selecting no device", values: values, inCapacity: extraPool}, nil
}

// roundTrip deep-copies v into out through JSON.
func roundTrip(v, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func TestPlanChange(t *testing.T) {
	all := map[string]any{"image": map[string]any{"tag": "e2e"}, "config": map[string]any{
		"resourcePrefix": "rdma.kube-rdma.io",
		"pools": []any{
			map[string]any{"name": "ib", "mode": "exclusive", "selectors": map[string]any{"linkLayers": []any{"InfiniBand"}}},
			map[string]any{"name": "roce-shared", "mode": "shared", "slots": float64(4), "selectors": map[string]any{"linkLayers": []any{"Ethernet"}}},
		},
	}}
	user := map[string]any{"image": map[string]any{"tag": "e2e"}}
	shared := []pool{{"ib", "exclusive", 2}, {"roce-shared", "shared", 8}}
	ch, err := planChange(all, user, shared, "rdma.kube-rdma.io")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"ib": 2, "roce-shared": 10}; !mapsEqual(want, ch.allocatable) || ch.inCapacity != "" {
		t.Errorf("slots change: allocatable %v, in capacity %q; want %v", ch.allocatable, ch.inCapacity, want)
	}
	if _, ok := user["config"]; ok {
		t.Error("planChange changed the user values it was given")
	}
	if got := all["config"].(map[string]any)["pools"].([]any)[1].(map[string]any)["slots"]; got != float64(4) {
		t.Errorf("planChange changed the values it was given: slots %v", got)
	}

	ch, err = planChange(all, nil, []pool{{"ib", "exclusive", 2}, {"roce-shared", "shared", 0}}, "rdma.kube-rdma.io")
	if err != nil {
		t.Fatal(err)
	}
	pools := ch.values["config"].(map[string]any)["pools"].([]any)
	if ch.inCapacity != extraPool || ch.allocatable != nil || len(pools) != 3 {
		t.Errorf("extra pool: in capacity %q, allocatable %v, %d pools; want %s, nil, 3", ch.inCapacity, ch.allocatable, len(pools), extraPool)
	}
	b, err := json.Marshal(ch.values)
	if err != nil || !strings.Contains(string(b), `"rdmaDevices":["e2e-nonexistent"]`) {
		t.Errorf("extra pool values: %s (%v)", b, err)
	}

	if _, err := planChange(all, nil, shared, "other.example.com"); err == nil {
		t.Error("another resource prefix: no error")
	}
}
