package suite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// testNodeState: the daemon publishes the node's RDMANodeState: named and owned
// by the node, every pool of the phase at its count, and a pod given a device
// of the chained pool among its allocations; `kubectl rdma nodes`, `pods` and
// `doctor` (its API checks) report that pod. Skips when the CRD is absent.
func testNodeState(t *testing.T, e *env) {
	p := e.devicePool(t)
	state := e.waitNodeState(t, "every pool at its count", func(s *v1alpha1.RDMANodeState) error {
		for _, want := range e.pools {
			i := slices.IndexFunc(s.Status.Pools, func(got v1alpha1.Pool) bool { return got.Name == want.name })
			if i < 0 {
				return fmt.Errorf("pool %s not in the state", want.name)
			}
			if got := s.Status.Pools[i]; int64(got.Allocatable) != want.count {
				return fmt.Errorf("pool %s: allocatable %d, want %d", want.name, got.Allocatable, want.count)
			}
		}
		return nil
	})
	if own := state.OwnerReferences; len(own) != 1 || own[0].Kind != "Node" || own[0].Name != e.node {
		t.Errorf("owner references %+v, want the Node %s", own, e.node)
	}
	if state.Spec.NodeName != e.node || state.Status.StateVersion != v1alpha1.StateVersion {
		t.Errorf("spec.nodeName %q, stateVersion %d; want %q, %d", state.Spec.NodeName, state.Status.StateVersion, e.node, v1alpha1.StateVersion)
	}

	ns := e.namespace(t)
	name := "state-1"
	e.createPod(t, e.devicePod(ns, name, p.name, 1))
	e.waitRunning(t, ns, name)
	devs := e.waitLog(t, ns, name, 1).env["KUBE_RDMA_"+envName(p.name)+"_RDMA_DEVICES"]
	took := time.Now()
	// The daemon writes the state at most every 2 s (--node-state-interval): a state with
	// the allocation may predate the CNI plugin's attachment record, which doctor checks.
	withPod := e.waitNodeState(t, "the pod's allocation", func(s *v1alpha1.RDMANodeState) error {
		for _, a := range s.Status.Allocations {
			if a.Namespace == ns && a.Pod == name && strings.Join(a.RDMADevices, ",") == devs {
				if p.name == e.chainedPool && len(a.Attached) == 0 {
					return fmt.Errorf("allocation of %s to %s/%s without its CNI attachment yet", devs, ns, name)
				}
				return nil
			}
		}
		return fmt.Errorf("no allocation of %s to %s/%s among %d", devs, ns, name, len(s.Status.Allocations))
	})
	t.Logf("pod %s/%s (%s) in the node state %s after it ran", ns, name, devs, time.Since(took).Round(time.Millisecond))

	out, code := e.kubectlRDMA(t, "nodes")
	if code != 0 || !strings.Contains(out, e.node) || strings.Contains(out, "no kube-rdma daemon") {
		t.Errorf("kubectl rdma nodes: exit %d, want the node %s with its daemon:\n%s", code, e.node, out)
	}
	out, code = e.kubectlRDMA(t, "pods", "-n", ns)
	if code != 0 || !strings.Contains(out, name) || !strings.Contains(out, devs) {
		t.Errorf("kubectl rdma pods -n %s: exit %d, want %s with %s:\n%s", ns, code, name, devs, out)
	}
	// bw's exec path through the API server and kubelet: the test image has no perftest,
	// which its probe (run in the pod) must find and say.
	out, code = e.kubectlRDMA(t, "bw", "-n", ns, name, name)
	if code != 1 || !strings.Contains(out, "ib_write_bw not found") {
		t.Errorf("kubectl rdma bw -n %s %s %s in an image without perftest: exit %d, want 1 and ib_write_bw not found:\n%s", ns, name, name, code, out)
	}
	if !e.fixtureDevs {
		out, code = e.kubectlRDMA(t, "doctor", "-n", ns, name)
		if code != 0 {
			t.Errorf("kubectl rdma doctor -n %s %s: exit %d, want every check to pass:\n%s", ns, name, code, out)
		}
		t.Logf("kubectl rdma doctor -n %s %s:\n%s", ns, name, out)
		e.deletePod(t, ns, name)
		return
	}
	// Fixture devices: the API checks and those of the netdev and the environment pass; the
	// device nodes have no driver behind them and the kernel no RDMA device, which the
	// in-container checks must find and explain.
	out, code = e.kubectlRDMA(t, "doctor", "-n", ns, name)
	t.Logf("kubectl rdma doctor -n %s %s (fixture devices):\n%s", ns, name, out)
	want := map[string]string{
		"/dev/infiniband device nodes openable":   "FAIL No such device or address",
		"NCCL environment matches the allocation": "PASS NCCL_IB_HCA=",
	}
	if !e.nccl(p.name) {
		want["NCCL environment matches the allocation"] = "SKIP none of the container's pools"
	}
	if p.name == e.chainedPool {
		// Found by its name in the pod (the CNI renamed it), from the state's attached devices.
		want["netdev up with an address"] = "PASS net1 up inet "
	}
	if slices.ContainsFunc(withPod.Status.Devices, func(d v1alpha1.Device) bool {
		return slices.Contains(strings.Split(devs, ","), d.Name) && d.LinkLayer == "Ethernet"
	}) {
		want["RoCE v2 GID"] = "FAIL the container does not see"
	}
	checks := doctorLines(out)
	for check, w := range want {
		verdict, detail, _ := strings.Cut(w, " ")
		got, ok := checks["in container: "+check]
		if !ok || !strings.HasPrefix(got, verdict+" ") || !strings.Contains(got, detail) {
			t.Errorf("doctor's %q: %q, want %s with %q", check, got, verdict, detail)
		}
	}
	if p.name == e.chainedPool {
		for check, w := range map[string]string{"CNI plugin": "PASS installed by the chart (chained)", "CNI attachment": "PASS "} {
			if got := checks[check]; !strings.HasPrefix(got, w) || (check == "CNI attachment" && !strings.Contains(got, " as net1")) {
				t.Errorf("doctor's %q: %q, want %q", check, got, w)
			}
		}
	}
	for check, got := range checks {
		if !strings.HasPrefix(check, "in container") && strings.HasPrefix(got, "FAIL") {
			t.Errorf("doctor's %q failed: %s", check, got)
		}
	}
	if code != 1 {
		t.Errorf("doctor exit %d, want 1 (checks failed)", code)
	}
	e.deletePod(t, ns, name)
}

// doctorLines maps each check of doctor's table output to "VERDICT detail".
func doctorLines(out string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		verdict, rest, ok := strings.Cut(strings.TrimSpace(line), "  ")
		if !ok || strings.ToUpper(verdict) != verdict || strings.HasPrefix(verdict, "fix") {
			continue
		}
		name, detail, _ := strings.Cut(rest, ": ")
		if strings.HasPrefix(name, "in container ") {
			// "in container CONTAINER: NAME: detail" -> "in container: NAME"
			n2, d2, _ := strings.Cut(detail, ": ")
			name, detail = "in container: "+n2, d2
		}
		m[name] = verdict + " " + detail
	}
	return m
}

// waitNodeState polls the node's RDMANodeState until check passes (60 s).
func (e *env) waitNodeState(t *testing.T, what string, check func(*v1alpha1.RDMANodeState) error) *v1alpha1.RDMANodeState {
	t.Helper()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crd := v1alpha1.Resource + "." + v1alpha1.GroupVersion.Group
	if _, err := e.dynamic.Resource(crds).Get(t.Context(), crd, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Skipf("the CRD %s is not installed (the chart installs it)", crd)
	}
	gvr := v1alpha1.GroupVersion.WithResource(v1alpha1.Resource)
	var state v1alpha1.RDMANodeState
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		u, err := e.dynamic.Resource(gvr).Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &state); err != nil {
			return err
		}
		return check(&state)
	})
	if err != nil {
		t.Fatalf("node state of %s: %s: %v", e.node, what, err)
	}
	return &state
}

// kubectlRDMA runs `kubectl rdma ARGS` in-process (the binary's code path)
// against the suite's cluster and returns its output and exit code.
func (e *env) kubectlRDMA(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	args = append([]string{"--kubeconfig", os.Getenv("E2E_KUBECONFIG")}, args...)
	code := kubectlrdma.Execute(t.Context(), args, kubectlrdma.Options{
		Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out},
	})
	return out.String(), code
}
