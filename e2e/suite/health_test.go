package suite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// testPortDown: port 1 of the phase's portDevice going down takes one device out of
// its pool's allocatable within 30 s; coming up puts it back. Where the kubelet writes device
// health into pods' status (ResourceHealthStatus), a pod holding the device shows it
// Unhealthy there, `kubectl rdma pods` and `doctor` say so, and it is Healthy again after.
func testPortDown(t *testing.T, e *env) {
	if e.portDevice == "" {
		t.Skip("the phase names no port device")
	}
	var exclusive []string
	for _, p := range e.exclusivePools() {
		exclusive = append(exclusive, p.name)
	}
	if len(exclusive) == 0 {
		t.Skip("the phase has no exclusive pool with devices")
	}
	want := e.counts()
	if err := e.waitAllocatable(t.Context(), 30*time.Second, want); err != nil {
		t.Fatalf("before the port goes down: %v", err)
	}
	// Where the kubelet writes device health into pods' status, every device of the exclusive
	// pools is held by a pod: the one whose port goes down must show Unhealthy in its pod's
	// status, and only there.
	gate, err := e.kubeletGateOn(t, resourceHealthGate, 36)
	if err != nil {
		t.Fatal(err)
	}
	var ns string
	var holders map[string]string
	if gate {
		ns = e.namespace(t)
		holders = e.holdPools(t, ns, exclusive, want)
		if err := e.waitPodsHealth(t.Context(), ns, holders, want, ""); err != nil {
			t.Fatalf("before the port goes down: %v", err)
		}
	} else {
		t.Logf("the kubelet runs without %s: no device health in pods' status to check", resourceHealthGate)
	}
	restored := e.portUpOnCleanup(t, e.portDevice, func(ctx context.Context) error {
		if err := e.waitAllocatable(ctx, 30*time.Second, want); err != nil {
			return fmt.Errorf("after restoring the port: %w", err)
		}
		return nil
	})
	e.mustHook(t, 30*time.Second, "port-state", e.portDevice, "1", "down")
	start := time.Now()
	var dropped string
	err = eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		got, err := e.nodeResources(ctx, false, poolNames(want)...)
		if err != nil {
			return err
		}
		dropped, err = oneDropped(want, got, exclusive)
		return err
	})
	if err != nil {
		t.Fatalf("port 1 of %s down: %v", e.portDevice, err)
	}
	t.Logf("port 1 of %s down: pool %s allocatable %d -> %d after %s", e.portDevice, dropped,
		want[dropped], want[dropped]-1, time.Since(start).Round(time.Millisecond))
	if gate {
		if err := e.waitPodsHealth(t.Context(), ns, holders, want, dropped); err != nil {
			t.Fatalf("port 1 of %s down: %v", e.portDevice, err)
		}
		line := fmt.Sprintf("port down: the pod holding %s showed it Unhealthy in its status (allocatedResourcesStatus) %s after the port went down, the other pools' pods all Healthy",
			e.portDevice, time.Since(start).Round(time.Millisecond))
		t.Log(line)
		e.appendReport(t, line)
		e.checkPodHealthCLI(t, ns, holders, dropped)
	}
	e.mustHook(t, 30*time.Second, "port-state", e.portDevice, "1", "up")
	up := time.Now()
	if err := e.waitAllocatable(t.Context(), 30*time.Second, want); err != nil {
		t.Fatalf("port 1 of %s up again: %v", e.portDevice, err)
	}
	if gate {
		if err := e.waitPodsHealth(t.Context(), ns, holders, want, ""); err != nil {
			t.Fatalf("port 1 of %s up again: %v", e.portDevice, err)
		}
		t.Logf("port up: every pod's devices Healthy in its status %s after the port came back", time.Since(up).Round(time.Millisecond))
	}
	restored()
}

// oneDropped returns the one exclusive pool whose allocatable is one below
// want, when every other exclusive pool is at want and no pool is above it
// (a shared pool holding the device may drop too).
func oneDropped(want, got map[string]int64, exclusive []string) (string, error) {
	var dropped []string
	for _, p := range poolNames(want) {
		switch {
		case got[p] > want[p]:
			return "", fmt.Errorf("pool %s allocatable %d, above %d", p, got[p], want[p])
		case slices.Contains(exclusive, p) && got[p] == want[p]-1:
			dropped = append(dropped, p)
		case slices.Contains(exclusive, p) && got[p] != want[p]:
			return "", fmt.Errorf("pool %s allocatable %d, want %d or %d", p, got[p], want[p], want[p]-1)
		}
	}
	if len(dropped) != 1 {
		return "", fmt.Errorf("allocatable %s: want one exclusive pool one below %s", fmtCounts(got), fmtCounts(want))
	}
	return dropped[0], nil
}

// testKubeletRestart: after a kubelet restart the pools are advertised again
// within 90 s, and a running pod keeps its container, devices and netdevs.
func testKubeletRestart(t *testing.T, e *env) {
	ns := e.namespace(t)
	w := e.startWatchedPod(t, ns)
	hb0, err := e.heartbeat(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	e.mustHook(t, 3*time.Minute, "restart-kubelet")
	start := time.Now()
	want := e.counts()
	err = eventually(t.Context(), 90*time.Second, func(ctx context.Context) error {
		hb, err := e.heartbeat(ctx)
		if err != nil {
			return err
		}
		if !hb.After(hb0) {
			return fmt.Errorf("node %s: no status from the restarted kubelet yet (Ready heartbeat %s)", e.node, hb)
		}
		got, err := e.nodeResources(ctx, false, poolNames(want)...)
		if err != nil {
			return err
		}
		if !mapsEqual(want, got) {
			return fmt.Errorf("node %s allocatable %s, want %s", e.node, fmtCounts(got), fmtCounts(want))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the kubelet restart: %v", err)
	}
	t.Logf("pools advertised again %s after the kubelet was healthy", time.Since(start).Round(time.Millisecond))
	w.checkIntact(t)
}

// heartbeat is the node's Ready condition's last heartbeat: the last time the
// kubelet posted the node's status.
func (e *env) heartbeat(ctx context.Context) (time.Time, error) {
	n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("get node %s: %w", e.node, err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.LastHeartbeatTime.Time, nil
		}
	}
	return time.Time{}, fmt.Errorf("node %s has no Ready condition", e.node)
}

// watchedPod is a running pod with one device that later checks compare
// against: same container, never restarted, same devices and netdevs.
type watchedPod struct {
	e           *env
	ns, name    string
	chained     bool
	containerID string
	first       tick
}

// startWatchedPod runs a pod with one device of the chained pool (else of an
// exclusive pool) and checks what it got.
func (e *env) startWatchedPod(t *testing.T, ns string) *watchedPod {
	t.Helper()
	return e.startWatchedPodOf(t, ns, e.devicePool(t))
}

// startWatchedPodOf runs a pod watched-<pool> with one device of p (one slot of a shared
// pool: a shared pool of one device) and checks what it got.
func (e *env) startWatchedPodOf(t *testing.T, ns string, p pool) *watchedPod {
	t.Helper()
	return e.startWatchedPodNamed(t, ns, "watched-"+dnsName(p.name), p)
}

// startWatchedPodNamed is startWatchedPodOf for a pod of the given name.
func (e *env) startWatchedPodNamed(t *testing.T, ns, name string, p pool) *watchedPod {
	t.Helper()
	w := &watchedPod{e: e, ns: ns, name: name, chained: p.name == e.chainedPool}
	e.createPod(t, e.devicePod(ns, w.name, p.name, 1))
	pod := e.waitRunning(t, ns, w.name)
	w.containerID = container(pod).ContainerID
	w.first = e.waitLog(t, ns, w.name, 1).ticks[0]
	problems := deviceProblems(w.first.dev, 1)
	if w.chained {
		problems = append(problems, netdevProblems(w.first.links, 1)...)
	}
	for _, s := range problems {
		t.Error(s)
	}
	if t.Failed() {
		t.FailNow()
	}
	return w
}

// checkIntact checks that the pod still runs its first container, never
// restarted, and that a tick logged after this call shows the devices and
// netdevs it started with.
func (w *watchedPod) checkIntact(t *testing.T) {
	t.Helper()
	l0 := w.e.waitLog(t, w.ns, w.name, 1)
	var cs corev1.ContainerStatus
	err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		pod, err := w.e.core.Pods(w.ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cs = container(pod)
		if pod.Status.Phase != corev1.PodRunning || cs.State.Running == nil {
			return fmt.Errorf("pod %s: phase %s, container %s", w.name, pod.Status.Phase, stateString(cs.State))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cs.ContainerID != w.containerID || cs.RestartCount != 0 {
		t.Errorf("pod %s: container %s with %d restarts, want %s with 0", w.name, cs.ContainerID, cs.RestartCount, w.containerID)
	}
	last := w.e.waitLog(t, w.ns, w.name, len(l0.ticks)+1).last()
	if !slices.Equal(last.dev, w.first.dev) {
		t.Errorf("pod %s: /dev/infiniband %v, started with %v", w.name, last.dev, w.first.dev)
	}
	if w.chained && !slices.Equal(last.links, w.first.links) {
		t.Errorf("pod %s: links %v, started with %v", w.name, last.links, w.first.links)
	}
}

func TestOneDropped(t *testing.T) {
	want := map[string]int64{"ib": 2, "vf": 24, "roce": 8}
	ex := []string{"ib", "vf"}
	tests := []struct {
		got  map[string]int64
		pool string
	}{
		{map[string]int64{"ib": 1, "vf": 24, "roce": 8}, "ib"},
		{map[string]int64{"ib": 2, "vf": 23, "roce": 0}, "vf"},
		{map[string]int64{"ib": 2, "vf": 24, "roce": 8}, ""},
		{map[string]int64{"ib": 1, "vf": 23, "roce": 8}, ""},
		{map[string]int64{"ib": 0, "vf": 24, "roce": 8}, ""},
		{map[string]int64{"ib": 1, "vf": 24, "roce": 9}, ""},
	}
	for _, tc := range tests {
		got, err := oneDropped(want, tc.got, ex)
		if got != tc.pool || (err == nil) != (tc.pool != "") {
			t.Errorf("oneDropped(%v) = %q, %v; want %q", tc.got, got, err, tc.pool)
		}
	}
}

// portUpOnCleanup brings port 1 of dev back up when the test ends, then runs
// then (nil: nothing), unless the test called the returned function: it
// brought the port up itself.
func (e *env) portUpOnCleanup(t *testing.T, dev string, then func(ctx context.Context) error) (restored func()) {
	done := false
	t.Cleanup(func() {
		if done {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := runHook(ctx, e.hook, "port-state", dev, "1", "up"); err != nil {
			t.Errorf("restore the port: %v", err)
		} else if then != nil {
			if err := then(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	return func() { done = true }
}

// testDefaultsPortDown: with the chart's default pools, port 1 of one
// Ethernet device (the phase's port device) down: the device shows
// Unhealthy in the node state, the shared pool that holds it with the
// other Ethernet devices keeps every slot allocatable, and a pod of it
// starts, with the device nodes of the whole set (a slot gives every
// device); the exclusive pools keep theirs.
func testDefaultsPortDown(t *testing.T, e *env) {
	var shared pool
	for _, p := range e.pools {
		if p.mode == "shared" {
			shared = p
		}
	}
	if shared.name == "" || e.portDevice == "" {
		t.Fatalf("pools %v, port device %q: want a shared pool and a port device", e.pools, e.portDevice)
	}
	want := e.counts()
	if err := e.waitAllocatable(t.Context(), 30*time.Second, want); err != nil {
		t.Fatalf("before the port goes down: %v", err)
	}
	restored := e.portUpOnCleanup(t, e.portDevice, nil)
	e.mustHook(t, 30*time.Second, "port-state", e.portDevice, "1", "down")
	start := time.Now()
	var set []string
	e.waitNodeState(t, "port 1 of "+e.portDevice+" down", func(s *v1alpha1.RDMANodeState) error {
		set = nil
		down := false
		for _, d := range s.Status.Devices {
			if slices.Contains(d.Pools, shared.name) {
				set = append(set, d.Name)
			}
			if d.Name == e.portDevice {
				down = !d.Healthy
			}
		}
		if !down {
			return fmt.Errorf("device %s still Healthy", e.portDevice)
		}
		return nil
	})
	t.Logf("port 1 of %s down: Unhealthy in the node state after %s; pool %s holds %d devices", e.portDevice,
		time.Since(start).Round(time.Millisecond), shared.name, len(set))
	if len(set) < 2 {
		t.Fatalf("pool %s holds %v: the test needs the port device and another", shared.name, set)
	}
	// The kubelet's allocatable follows the daemon's ListAndWatch within its
	// health interval: hold it a while, not only once.
	for range 5 {
		got, err := e.nodeResources(t.Context(), false, poolNames(want)...)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("with port 1 of %s down: allocatable %s, want %s (every slot of %s while one device of its set is up)",
				e.portDevice, fmtCounts(got), fmtCounts(want), shared.name)
		}
		time.Sleep(time.Second)
	}
	ns := e.namespace(t)
	e.createPod(t, e.devicePod(ns, "shared-port-down", shared.name, 1))
	e.waitRunning(t, ns, "shared-port-down")
	l := e.waitLog(t, ns, "shared-port-down", 1)
	got := l.env["KUBE_RDMA_"+envName(shared.name)+"_RDMA_DEVICES"]
	t.Logf("pod of %s with port 1 of %s down: %s", shared.name, e.portDevice, got)
	if names := strings.Split(got, ","); len(names) != len(set) || !slices.Contains(names, e.portDevice) {
		t.Errorf("pod of %s: devices %q, want the whole set %v", shared.name, got, set)
	}
	e.appendReport(t, fmt.Sprintf("defaults: port 1 of %s down: every slot of %s allocatable (%s), a pod of it Running with the %d devices of the set",
		e.portDevice, shared.name, fmtCounts(want), len(set)))
	e.deletePod(t, ns, "shared-port-down")
	e.mustHook(t, 30*time.Second, "port-state", e.portDevice, "1", "up")
	restored()
	if err := e.waitAllocatable(t.Context(), 30*time.Second, want); err != nil {
		t.Fatalf("port 1 of %s up again: %v", e.portDevice, err)
	}
}
