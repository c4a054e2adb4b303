package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// resourceHealthGate is the kubelet feature that writes the health of a pod's devices into its
// status (containerStatuses[].allocatedResourcesStatus): alpha (off) in 1.34 and 1.35, beta
// (on by default) from 1.36.
const resourceHealthGate = "ResourceHealthStatus"

// kubeletGateOn says whether the node's kubelet runs with feature gate on: its /configz
// (through the API server's node proxy) when it names the gate, else the default of its
// version (on from defaultFrom). A /configz the API server cannot reach is logged and the
// version's default taken.
func (e *env) kubeletGateOn(t *testing.T, gate string, defaultFrom uint) (bool, error) {
	ctx := t.Context()
	var cz struct {
		KubeletConfig struct {
			FeatureGates map[string]bool `json:"featureGates"`
		} `json:"kubeletconfig"`
	}
	b, err := e.core.RESTClient().Get().AbsPath("/api/v1/nodes", e.node, "proxy", "configz").DoRaw(ctx)
	if err == nil {
		err = json.Unmarshal(b, &cz)
	}
	if err != nil {
		t.Logf("the kubelet's /configz (%v): taking the default of its version for %s", err, gate)
	}
	if on, ok := cz.KubeletConfig.FeatureGates[gate]; ok {
		return on, nil
	}
	n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	v, err := version.ParseGeneric(n.Status.NodeInfo.KubeletVersion)
	if err != nil {
		return false, fmt.Errorf("node %s kubelet version: %w", e.node, err)
	}
	return v.Minor() >= defaultFrom, nil
}

// holdPools starts one pod per exclusive pool of the phase holding every device of it, and
// waits until they run; it returns the pods' names by pool.
func (e *env) holdPools(t *testing.T, ns string, pools []string, want map[string]int64) map[string]string {
	t.Helper()
	names := map[string]string{}
	for i, p := range pools {
		if want[p] == 0 {
			continue
		}
		names[p] = "hold-" + strconv.Itoa(i)
		e.createPod(t, e.devicePod(ns, names[p], p, want[p]))
	}
	for _, n := range names {
		e.waitRunning(t, ns, n)
	}
	return names
}

// podsHealth is what the pods' status says of their devices of the phase's pools: the number
// of Unhealthy (or Unknown) and of Healthy devices per pod, as `kubectl rdma pods` reads it.
func (e *env) podsHealth(ctx context.Context, ns string, pods map[string]string) (bad, good map[string]int, err error) {
	bad, good = map[string]int{}, map[string]int{}
	for pool, name := range pods {
		p, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				if rs.Name != e.resource(pool) {
					continue
				}
				for _, r := range rs.Resources {
					if r.Health == corev1.ResourceHealthStatusHealthy {
						good[name]++
					} else {
						bad[name]++
					}
				}
			}
		}
	}
	return bad, good, nil
}

// waitPodsHealth waits until the pod of pool unhealthy ("": none) has exactly one device not
// Healthy and every other device of every pod is reported Healthy.
func (e *env) waitPodsHealth(ctx context.Context, ns string, pods map[string]string, want map[string]int64, unhealthy string) error {
	return eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		bad, good, err := e.podsHealth(ctx, ns, pods)
		if err != nil {
			return err
		}
		for pool, name := range pods {
			wantBad := 0
			if pool == unhealthy {
				wantBad = 1
			}
			if bad[name] != wantBad || int64(good[name]) != want[pool]-int64(wantBad) {
				return fmt.Errorf("pod %s (pool %s, %d devices): %d not Healthy, %d Healthy in its status; want %d not Healthy",
					name, pool, want[pool], bad[name], good[name], wantBad)
			}
		}
		return nil
	})
}

// checkPodHealthCLI: `kubectl rdma pods -o json` says Unhealthy for the pod of pool unhealthy
// only, and `kubectl rdma doctor` warns on that pod's device health.
func (e *env) checkPodHealthCLI(t *testing.T, ns string, pods map[string]string, unhealthy string) {
	t.Helper()
	out, code := e.kubectlRDMA(t, "pods", "-n", ns, "-o", "json")
	var l kubectlrdma.PodAllocationList
	// Its stdout and stderr are one stream here: the object is the first JSON value in it.
	err := fmt.Errorf("no JSON object")
	if i := strings.Index(out, "{"); i >= 0 {
		err = json.NewDecoder(strings.NewReader(out[i:])).Decode(&l)
	}
	if code != 0 || err != nil {
		t.Errorf("kubectl rdma pods -n %s -o json: exit %d, %v:\n%s", ns, code, err, out)
		return
	}
	for _, a := range l.Items {
		want := "Healthy"
		if a.Pod == pods[unhealthy] {
			want = "Unhealthy"
		}
		if a.Health != want {
			t.Errorf("kubectl rdma pods: pod %s health %q (%+v), want %s", a.Pod, a.Health, a.DeviceHealth, want)
		}
	}
	out, _ = e.kubectlRDMA(t, "doctor", "-n", ns, pods[unhealthy], "--no-exec")
	if got := doctorLines(out)["device health (kubelet)"]; !strings.HasPrefix(got, "WARN") || !strings.Contains(got, "Unhealthy") {
		t.Errorf("kubectl rdma doctor %s: device health %q, want a warning naming the Unhealthy device:\n%s", pods[unhealthy], got, out)
	}
}

// waitClaimPodHealth waits until every device of kube-rdma's DRA driver in the claims of pod
// has health want in the pod's status (at least one), as the kubelet names them: by the
// claim's CDI device (kube-rdma.io/claim=...) or <driver>/<pool>/<device>.
func (e *env) waitClaimPodHealth(ctx context.Context, ns, pod string, want corev1.ResourceHealthStatus) error {
	return eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		p, err := e.core.Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var got []string
		ok := true
		for _, cs := range p.Status.ContainerStatuses {
			for _, rs := range cs.AllocatedResourcesStatus {
				if !strings.HasPrefix(string(rs.Name), "claim:") {
					continue
				}
				for _, r := range rs.Resources {
					id := string(r.ResourceID)
					if !strings.HasPrefix(id, "kube-rdma.io/claim=") && !strings.HasPrefix(id, draDriver+"/") {
						continue
					}
					got = append(got, fmt.Sprintf("%s %s %s", rs.Name, id, r.Health))
					ok = ok && r.Health == want
				}
			}
		}
		if len(got) == 0 || !ok {
			return fmt.Errorf("pod %s: its claim devices' health in its status %q, want each %s", pod, got, want)
		}
		return nil
	})
}
