package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rdmaDownFile is the e2e build's switch for RDMA netlink that does not answer
// (fakerdma.DefaultDownFile; the suite does not link the e2e build).
const rdmaDownFile = parkDir + "/rdma-netlink-down"

// rdmaDownHold is how long RDMA netlink stays down at least: three of the kubelet's runtime
// status checks (every 5 s) and node status updates (every 10 s), so a network the runtime
// reported not ready would have shown on the Node.
const rdmaDownHold = 30 * time.Second

// testFaultRDMANetlinkDown: RDMA netlink stops answering on the node, as while a driver
// container unloads and reloads the RDMA stack, under a primary conflist of cniVersion 1.1.0,
// whose STATUS containerd asks before it reports the node's network ready to the kubelet. The
// plugin built with kuberdma_e2e (hook describe's cni-e2e-binary) replaces the installed one
// for the test: its RDMA netlink (internal/fakerdma) answers until the file rdmaDownFile
// exists, then fails every call. First its STATUS is seen answered healthy (the daemon's
// metric, code 0), which shows containerd asks it; then, netlink down, STATUS is answered
// success but counted degraded (code 50), the Node stays Ready all through, and a pod without
// RDMA starts and is deleted. Netlink back, the installed plugin and conflist are put back and
// the invariant check follows.
func testFaultRDMANetlinkDown(t *testing.T, e *env) {
	c := e.needFaults(t)
	plugin := loadE2EPlugin(t, c)
	origList, err := os.ReadFile(c.conflist)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(origList, &list); err != nil {
		t.Fatalf("%s: %v", c.conflist, err)
	}
	list["cniVersion"] = "1.1.0"
	v110, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}

	f := e.beginFault(t, "RDMA netlink down", e.chainedPool)
	var restoreOnce sync.Once
	restore := func() {
		restoreOnce.Do(func() {
			if err := os.Remove(rdmaDownFile); err != nil && !os.IsNotExist(err) {
				t.Errorf("remove %s: %v", rdmaDownFile, err)
			}
			if err := plugin.restore(); err != nil {
				t.Errorf("put the installed CNI plugin back: %v", err)
			}
			if err := writeConflist(c.conflist, origList); err != nil {
				t.Errorf("restore %s: %v", c.conflist, err)
			}
		})
	}
	t.Cleanup(restore)
	// The conflist first: cni-chain looks at a conflist that changed (200 ms after the
	// directory is quiet) and installs its own binary again then. The e2e build after that.
	if err := writeConflist(c.conflist, v110); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if err := plugin.install(); err != nil {
		t.Fatal(err)
	}
	stillHooked := func(when string) {
		t.Helper()
		ok, err := plugin.installed()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Fatalf("%s: %s is no longer the plugin built with kuberdma_e2e (cni-chain installed its own again?)", when, c.cniBin)
		}
	}
	sample := func(code string) string {
		return fmt.Sprintf(`kube_rdma_cni_operations_total{code="%s",command="STATUS",pool="%s"}`, code, e.chainedPool)
	}
	healthy, degraded := sample("0"), sample("50")
	// containerd asks STATUS of a 1.1.0 network when the kubelet asks the runtime's status.
	if _, err := e.waitMetricAbove(t.Context(), healthy, e.metricValue(t, healthy), 2*time.Minute); err != nil {
		t.Fatalf("containerd never asked the 1.1.0 network's STATUS (or the daemon did not count it): %v", err)
	}
	stillHooked("STATUS answered healthy")

	if err := os.MkdirAll(parkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	d0 := e.metricValue(t, degraded)
	// The kubelet's PodResources Gets over the fault: STATUS (every 5 s) and the pod without
	// RDMA pass through on the kubelet's device checkpoint, without asking it.
	gets0 := e.kubeletSample(t, kubeletGetSample)
	if err := os.WriteFile(rdmaDownFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	// The Node's Ready condition, sampled every second while netlink is down; judged when
	// the sampling stops, also when the test ends early (a pod that never starts).
	ctx, stopWatch := context.WithCancel(t.Context())
	var (
		samples, notReady int
		firstNotReady     string
		watched           = make(chan struct{})
		judged            sync.Once
	)
	judgeReady := func() {
		judged.Do(func() {
			stopWatch()
			<-watched
			if notReady > 0 {
				t.Errorf("the Node was not Ready in %d of %d samples while RDMA netlink was down; first %s", notReady, samples, firstNotReady)
			}
		})
	}
	defer judgeReady()
	go func() {
		defer close(watched)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			if n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{}); err == nil {
				samples++
				if r := nodeCondition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue {
					notReady++
					if firstNotReady == "" {
						firstNotReady = fmt.Sprintf("%.1f s after netlink went down: %+v", time.Since(down).Seconds(), r)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	_, err = e.waitMetricAbove(t.Context(), degraded, d0, 2*time.Minute)
	if err != nil {
		t.Fatalf("no STATUS answered while RDMA netlink was down: %v", err)
	}
	degradedIn := time.Since(down)

	plain := e.devicePod(f.ns, "no-rdma", "", 0)
	created := time.Now()
	e.createPod(t, plain)
	e.waitRunning(t, f.ns, plain.Name)
	startedIn := time.Since(created)
	e.deletePod(t, f.ns, plain.Name)
	if rest := rdmaDownHold - time.Since(down); rest > 0 {
		time.Sleep(rest)
	}
	d1 := e.metricValue(t, degraded)
	gets := e.kubeletSample(t, kubeletGetSample) - gets0
	if gets != 0 {
		t.Errorf("%v kubelet PodResources Gets while STATUS was asked and a pod without RDMA started, want 0", gets)
	}
	stillHooked("RDMA netlink down")
	judgeReady()
	heldDown := time.Since(down)
	if err := os.Remove(rdmaDownFile); err != nil {
		t.Fatal(err)
	}
	f.healed = time.Now()
	restore()

	if samples < int(rdmaDownHold/time.Second)/2 {
		t.Errorf("the Node was read %d times in %.0f s of RDMA netlink down, want one a second", samples, heldDown.Seconds())
	}
	out := f.check(t)
	f.report(t, fmt.Sprintf("RDMA netlink down %.0f s under a 1.1.0 primary conflist (the plugin's fake netlink failing every call): containerd's STATUS answered success, %.0f counted degraded (first %.1f s after), the Node Ready in %d of %d samples (one a second), a pod without RDMA Running %.1f s after its creation and deleted; kubelet PodResources Gets meanwhile %v",
		heldDown.Seconds(), d1-d0, degradedIn.Seconds(), samples-notReady, samples, startedIn.Seconds(), gets), out)
}

func nodeCondition(n *corev1.Node, typ corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == typ {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// metricValue is the daemon's sample now; 0 when it has none yet.
func (e *env) metricValue(t *testing.T, sample string) float64 {
	t.Helper()
	var v float64
	err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		got, _, err := e.metric(ctx, sample)
		v = got
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitMetricAbove waits until the daemon's sample is above v and returns it.
func (e *env) waitMetricAbove(ctx context.Context, sample string, v float64, timeout time.Duration) (float64, error) {
	var got float64
	err := eventually(ctx, timeout, func(ctx context.Context) error {
		now, _, err := e.metric(ctx, sample)
		if err != nil {
			return err
		}
		if now <= v {
			return fmt.Errorf("%s = %v, want above %v", sample, now, v)
		}
		got = now
		return nil
	})
	return got, err
}
