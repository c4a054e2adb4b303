package kubectlrdma

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// TestGivenUpChecks: each NIC the CNI plugin gave up on (status.givenUp) is
// a warning of the node's checks naming the device, the pod, when and why.
func TestGivenUpChecks(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := &v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	s.Status.StateVersion, s.Status.LastUpdate = v1alpha1.StateVersion, metav1.NewTime(now)
	s.Status.GivenUp = []v1alpha1.DeviceGivenUp{
		{Time: metav1.NewTime(now.Add(-2 * time.Hour)), Command: "DEL", Device: "mlx5_3", Netdev: "ens1f0v2", Function: "0000:3b:00.3",
			Reason: "function-gone", Namespace: "ml", Pod: "trainer-0"},
		{Time: metav1.NewTime(now.Add(-time.Minute)), Command: "GC", Device: "mlx5_9", Reason: "vanished"},
	}
	checks, err := nodeChecks(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, s, nil, now, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []Check
	for _, c := range checks {
		if strings.HasSuffix(c.Name, " given up") {
			got = append(got, c)
		}
	}
	if len(got) != 2 {
		t.Fatalf("%d given-up checks, want 2: %+v", len(got), checks)
	}
	for i, want := range [][]string{
		{"device mlx5_3 given up", "DEL of pod ml/trainer-0 gave up mlx5_3", "120m ago", "0000:3b:00.3 left the node"},
		{"device mlx5_9 given up", "GC of a pod gave up mlx5_9", "60s ago", "neither the pod's network namespace nor the host's"},
	} {
		c := got[i]
		if c.Verdict != Warn || c.Name != want[0] || c.Fix == "" {
			t.Errorf("check %d: %+v", i, c)
		}
		for _, w := range want[1:] {
			if !strings.Contains(c.Detail, w) {
				t.Errorf("check %d: %q does not say %q", i, c.Detail, w)
			}
		}
	}
	s.Status.GivenUp = nil
	checks, _ = nodeChecks(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, s, nil, now, 10*time.Minute)
	for _, c := range checks {
		if strings.HasSuffix(c.Name, " given up") {
			t.Errorf("no give-ups, yet %+v", c)
		}
	}
}
