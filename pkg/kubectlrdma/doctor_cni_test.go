package kubectlrdma

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func TestCNIChecks(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	state := func(mode, netns, poolMode string, attached bool) *v1alpha1.RDMANodeState {
		s := &v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
		s.Status.RDMANetnsMode = netns
		s.Status.Pools = []v1alpha1.Pool{{Name: "ib", Resource: "rdma.kube-rdma.io/ib", Mode: poolMode}}
		a := v1alpha1.Allocation{Namespace: "ns", Pod: "p", Container: "c", Resource: "rdma.kube-rdma.io/ib",
			RDMADevices: []string{"mlx5_0"}, Netdevs: []string{"ib0"}}
		if attached {
			a.Attached = []v1alpha1.AttachedDevice{{RDMADevice: "mlx5_0", Netdev: "ib0", PodNetdev: "net1"}}
		}
		s.Status.Allocations = []v1alpha1.Allocation{a}
		if mode != "" {
			s.Status.CNI = &v1alpha1.CNIStatus{Mode: mode, Attachments: 1}
		}
		return s
	}
	for _, tt := range []struct {
		mode, netns, pool string
		attached          bool
		node, pod         Verdict // "" for the pod: no check
		podFix            string
	}{
		{"chained", "exclusive", "exclusive", true, Pass, Pass, ""},
		{"chained", "exclusive", "exclusive", false, Pass, Fail, "cni.chained.pool"},
		{"multus", "shared", "exclusive", false, Pass, Fail, "k8s.v1.cni.cncf.io/networks"},
		{"none", "shared", "exclusive", false, Warn, Warn, "cni.mode chained or multus"},
		{"not-installed", "exclusive", "exclusive", false, Fail, Fail, "cni.install=true"},
		{"not-installed", "shared", "exclusive", false, Warn, Warn, "cni.install=true"},
		{"not-installed", "shared", "shared", false, Pass, "", ""},
		{"", "exclusive", "exclusive", false, Skip, "", ""},
	} {
		s := state(tt.mode, tt.netns, tt.pool, tt.attached)
		if got := cniCheck(&s.Status); got.Verdict != tt.node {
			t.Errorf("%+v: node check %s (%s), want %s", tt, got.Verdict, got.Detail, tt.node)
		}
		c, ok := cniAttachmentCheck(pod, s)
		switch {
		case tt.pod == "" && ok:
			t.Errorf("%+v: pod check %+v, want none", tt, c)
		case tt.pod != "" && (!ok || c.Verdict != tt.pod || !strings.Contains(c.Fix, tt.podFix)):
			t.Errorf("%+v: pod check %+v (ok %v), want %s with a fix naming %q", tt, c, ok, tt.pod, tt.podFix)
		}
	}
}
