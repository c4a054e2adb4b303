package kubectlrdma

import (
	"strings"
	"testing"
	"time"

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

// TestDoctorMultiPoolPod: the three false failures of a correct pod with an
// InfiniBand pool (NCCL's) and the chained RoCE VF pool (nccl: false).
func TestDoctorMultiPoolPod(t *testing.T) {
	started := metav1.NewTime(time.Date(2025, 1, 1, 12, 0, 10, 0, time.UTC))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &started}}
	s := &v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	s.Status.LastUpdate = metav1.NewTime(started.Add(time.Second))
	s.Status.CNI = &v1alpha1.CNIStatus{Mode: "chained", Attachments: 1}
	s.Status.Pools = []v1alpha1.Pool{
		{Name: "ib", Resource: "rdma.kube-rdma.io/ib", Mode: "exclusive"},
		{Name: "vf", Resource: "rdma.kube-rdma.io/vf", Mode: "exclusive", NoNCCL: true},
	}
	s.Status.Devices = []v1alpha1.Device{{Name: "mlx5_0", Healthy: true}, {Name: "mlx5_3", Healthy: true}}
	s.Status.Allocations = []v1alpha1.Allocation{
		{Namespace: "ns", Pod: "p", Container: "c", Resource: "rdma.kube-rdma.io/ib", RDMADevices: []string{"mlx5_0"}, Netdevs: []string{"ib0"}},
		{Namespace: "ns", Pod: "p", Container: "c", Resource: "rdma.kube-rdma.io/vf", RDMADevices: []string{"mlx5_3"}, Netdevs: []string{"eth3"},
			Attached: []v1alpha1.AttachedDevice{{RDMADevice: "mlx5_3", Netdev: "eth3", PodNetdev: "net1"}}},
	}

	t.Run("CNI attachment judges the chained pool only", func(t *testing.T) {
		c, ok := cniAttachmentCheck(pod, s)
		if !ok || c.Verdict != Pass {
			t.Errorf("got %+v (ok %v), want a pass", c, ok)
		}
	})

	// A daemon that names the chained pool: a pod with devices of the
	// other pool only (nothing attached, by design) gets no check at all,
	// and a pod of the chained pool without its attachment still fails.
	t.Run("CNI attachment with the chained pool named", func(t *testing.T) {
		named := s.DeepCopy()
		named.Status.CNI.ChainedPool = "vf"
		ibOnly := named.DeepCopy()
		ibOnly.Status.Allocations = ibOnly.Status.Allocations[:1]
		if c, ok := cniAttachmentCheck(pod, ibOnly); ok && c.Verdict != Pass {
			t.Errorf("ib-only pod: %+v, want no failure", c)
		}
		if c, ok := cniAttachmentCheck(pod, named); !ok || c.Verdict != Pass || !strings.Contains(c.Detail, "not the chained pool (vf)") {
			t.Errorf("ib + vf pod: %+v (ok %v), want a pass naming the chained pool", c, ok)
		}
		vfMissing := named.DeepCopy()
		vfMissing.Status.Allocations[1].Attached = nil
		if c, ok := cniAttachmentCheck(pod, vfMissing); !ok || c.Verdict != Fail || !strings.Contains(c.Detail, "rdma.kube-rdma.io/vf") {
			t.Errorf("vf not attached: %+v (ok %v), want a failure naming vf", c, ok)
		}
	})

	allocs := containerAllocs(pod, s)
	if len(allocs) != 1 {
		t.Fatalf("container allocations %+v, want one", allocs)
	}
	for _, tt := range []struct {
		name, hca string
		ucx       string // "": not printed (an older script)
		alloc     containerAlloc
		want      Verdict
		detail    string
	}{
		{"NCCL_IB_HCA names the NCCL pool's devices", "=mlx5_0", "", allocs[0], Pass, "NCCL_IB_HCA==mlx5_0"},
		{"UCX_NET_DEVICES names the same device's port", "=mlx5_0", "mlx5_0:1", allocs[0], Pass, "NCCL_IB_HCA==mlx5_0, UCX_NET_DEVICES=mlx5_0:1"},
		{"UCX_NET_DEVICES unset (a daemon before it)", "=mlx5_0", "<unset>", allocs[0], Pass, "NCCL_IB_HCA==mlx5_0"},
		{"UCX_NET_DEVICES names the other pool's device", "=mlx5_0", "mlx5_3:1", allocs[0], Fail, "UCX_NET_DEVICES=mlx5_3:1, allocated mlx5_0"},
		{"UCX_NET_DEVICES without a port", "=mlx5_0", "mlx5_0", allocs[0], Fail, "UCX_NET_DEVICES=mlx5_0, allocated mlx5_0"},
		{"the other pool's value: the kubelet's merge of two NCCL pools", "=mlx5_3", "",
			func() containerAlloc {
				a := allocs[0]
				a.ncclPools = []string{"ib", "vf"}
				a.nccl = a.devices
				return a
			}(),
			Fail, "each of which sets NCCL_IB_HCA to its own devices"},
		{"a pod spec's own value", "=mlx5_1", "", allocs[0], Fail, "allocated mlx5_0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ncclCheck(containerView{hca: tt.hca, gidIndex: "<unset>", ucx: tt.ucx}, tt.alloc)
			if c.Verdict != tt.want || !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("got %+v, want %s with %q", c, tt.want, tt.detail)
			}
		})
	}

	roce := map[string][]gidEntry{"mlx5_0": {{port: 1, index: 3, typ: "RoCE v2"}}}
	for _, tt := range []struct {
		name, nccl, ucx string // "": not printed (an older script)
		gids            map[string][]gidEntry
		want            Verdict
		detail          string
	}{
		{"UCX_IB_GID_INDEX with NCCL_IB_GID_INDEX, the same", "3", "3", roce, Pass, "NCCL_IB_GID_INDEX=3, UCX_IB_GID_INDEX=3"},
		{"UCX_IB_GID_INDEX not printed (an older kubectl-rdma script)", "3", "", roce, Pass, "NCCL_IB_GID_INDEX=3"},
		{"UCX_IB_GID_INDEX differs from NCCL_IB_GID_INDEX", "3", "1", nil, Fail, "UCX_IB_GID_INDEX=1, NCCL_IB_GID_INDEX=3"},
		{"UCX_IB_GID_INDEX alone, on a RoCE v2 GID", "<unset>", "3", roce, Pass, "UCX_IB_GID_INDEX=3"},
		{"UCX_IB_GID_INDEX alone, on no RoCE v2 GID", "<unset>", "1", roce, Fail, "the allocated ports' RoCE v2 GIDs are at 3"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := containerView{hca: "=mlx5_0", gidIndex: tt.nccl, ucxGID: tt.ucx, ucx: "<unset>", gids: tt.gids}
			c := ncclCheck(v, allocs[0])
			if c.Verdict != tt.want || !strings.Contains(c.Detail, tt.detail) {
				t.Errorf("got %+v, want %s with %q", c, tt.want, tt.detail)
			}
		})
	}

	t.Run("a state older than the pod is not a missing allocation", func(t *testing.T) {
		old := s.DeepCopy()
		old.Status.LastUpdate = metav1.NewTime(started.Add(-time.Second))
		old.Status.Allocations = old.Status.Allocations[:1]
		c, _ := containerAllocation(pod, "c", "rdma.kube-rdma.io/vf", 1, old)
		if c.Verdict != Warn || !strings.Contains(c.Detail, "is older than the pod's containers") {
			t.Errorf("got %+v, want a warning that the state is older than the pod", c)
		}
		c, _ = containerAllocation(pod, "c", "rdma.kube-rdma.io/vf", 1, func() *v1alpha1.RDMANodeState {
			n := old.DeepCopy()
			n.Status.LastUpdate = metav1.NewTime(started.Add(time.Minute))
			return n
		}())
		if c.Verdict != Fail {
			t.Errorf("state newer than the pod without the allocation: got %+v, want a failure", c)
		}
	})
}
