package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// drainTaintKey is a NoSchedule taint each node of a release carries while its helm uninstall
// runs. The agent's DaemonSet does not tolerate it, as it does not tolerate a node that went
// NotReady or was cordoned for a drain after its pod started there: the pod and its files stay
// on the node, and the uninstall hook must still reach it. The hook's DaemonSet tolerates every
// taint; its waiting Job (one pod) tolerates this one through cni.uninstallHook.jobTolerations,
// which install sets for the working tree's chart.
const drainTaintKey = "e2e.kube-rdma.io/draining"

// drainValues is the values layer that lets the uninstall hook's Job run on a tainted node.
func drainValues() values {
	return values{"cni": values{"uninstallHook": values{"jobTolerations": []any{
		values{"key": drainTaintKey, "operator": "Exists"},
	}}}}
}

// drainTolerated says whether release name's deployed values let its hook's Job tolerate the
// drain taint (a previous release's chart, or an upgrade that reset the values, does not).
func (e *env) drainTolerated(ctx context.Context, name string) (bool, error) {
	out, err := e.runHelm(ctx, "get", "values", name, "--all", "-o", "json")
	if err != nil {
		return false, err
	}
	var v struct {
		CNI struct {
			UninstallHook struct {
				JobTolerations []struct {
					Key string `json:"key"`
				} `json:"jobTolerations"`
			} `json:"uninstallHook"`
		} `json:"cni"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return false, fmt.Errorf("helm get values %s: %w", name, err)
	}
	return slices.ContainsFunc(v.CNI.UninstallHook.JobTolerations, func(t struct {
		Key string `json:"key"`
	}) bool {
		return t.Key == drainTaintKey
	}), nil
}

// setDrainTaint adds (on) or removes the drain taint of node.
func (e *env) setDrainTaint(ctx context.Context, node string, on bool) error {
	return eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		n, err := e.core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		has := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == drainTaintKey })
		if has == on {
			return nil
		}
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == drainTaintKey })
		if on {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: drainTaintKey, Value: "uninstall", Effect: corev1.TaintEffectNoSchedule})
		}
		_, err = e.core.Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
}

// drainForUninstall taints the nodes of each release whose hook's Job tolerates it, and returns
// the function that removes the taints again (also registered as a cleanup).
func (e *env) drainForUninstall(t *testing.T, releases []release) func() {
	t.Helper()
	var tainted []string
	undo := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, node := range tainted {
			if err := e.setDrainTaint(ctx, node, false); err != nil {
				t.Errorf("remove the drain taint of node %s: %v", node, err)
			}
		}
		tainted = nil
	}
	t.Cleanup(undo)
	for _, r := range releases {
		ok, err := e.drainTolerated(t.Context(), r.name)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			t.Logf("helm uninstall %s: nodes not tainted (its values do not let the hook's Job tolerate %s)", r.name, drainTaintKey)
			continue
		}
		for _, node := range e.releaseNodes(r) {
			if slices.Contains(tainted, node) {
				continue
			}
			if err := e.setDrainTaint(t.Context(), node, true); err != nil {
				t.Fatalf("taint node %s: %v", node, err)
			}
			tainted = append(tainted, node)
		}
		t.Logf("helm uninstall %s: nodes %v tainted %s:NoSchedule, which the agent does not tolerate", r.name, e.releaseNodes(r), drainTaintKey)
	}
	return undo
}
