package kubectlrdma

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// TestDoctorNetdevsMissing: the world plus vf-1 on gpu-a, whose sandbox was
// created while the kube-rdma entry was missing from the conflist: the
// daemon lists it in status.podsWithoutNetdevs, and doctor fails it with
// the pool, the device and the fix (golden). vf-0, attached, gets no such
// line.
func TestDoctorNetdevsMissing(t *testing.T) {
	w := newWorld(t)
	i := 1
	if w.states[i].Name != "gpu-a" {
		t.Fatalf("world state %d is %s, want gpu-a", i, w.states[i].Name)
	}
	st := &w.states[i].Status
	d := st.Devices[4]
	st.Allocations = append(st.Allocations, alloc("train", "vf-1", "rdma.kube-rdma.io/roce-vf", []string{d.PCIAddress}, []string{d.Name}, d.Netdevs))
	st.PodsWithoutNetdevs = []v1alpha1.PodWithoutNetdevs{{Namespace: "train", Pod: "vf-1", Pool: "roce-vf", Why: "chained CNI",
		Devices: []string{d.Name}, Since: metav1.NewTime(now.Add(-5 * time.Minute))}}
	w.pods = append(w.pods, pod("train", "vf-1", "gpu-a", corev1.PodRunning, map[string]int64{"rdma.kube-rdma.io/roce-vf": 1}))
	f := &fakeCluster{w: w}
	checkGolden(t, "doctor-vf-1-no-netdev", transcript(f.newCluster, []string{"doctor", "-n", "train", "vf-1", "--no-exec"}))
	if out := transcript(f.newCluster, []string{"doctor", "-n", "train", "vf-0", "--no-exec"}); strings.Contains(out, "netdevs of pool") {
		t.Errorf("doctor of vf-0, attached, says netdevs are missing:\n%s", out)
	}
}
