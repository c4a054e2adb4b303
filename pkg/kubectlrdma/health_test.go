package kubectlrdma

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// TestPodHealth: the kubelet's device health of the pod's kube-rdma devices only (its extended
// resources, claims' devices of the kube-rdma driver), init containers first, a missing health
// read as Unknown, and the worst of them: Unhealthy over Unknown over Healthy.
func TestPodHealth(t *testing.T) {
	if draDriverName != claimrecord.DriverName || draCDIKind != claimrecord.CDIKind {
		t.Fatalf("draDriverName %q, draCDIKind %q; the driver's name is %q, its CDI kind %q", draDriverName, draCDIKind, claimrecord.DriverName, claimrecord.CDIKind)
	}
	p := pod("train", "w", "n1", corev1.PodRunning, map[string]int64{ibRes: 1})
	if worst, hs := podHealth(&p, []string{ibRes}); worst != "" || hs != nil {
		t.Fatalf("no status: %q %v, want none", worst, hs)
	}
	p = withHealth(p, health(ibRes, "a", "Healthy", ""), health(gpuRes, "g", "Unhealthy", ""),
		health("claim:gpu", "gpu.example.com/n1/p/g0", "Unhealthy", ""),
		health("claim:nic/r", "rdma.kube-rdma.io/n1/roce/d0", "", "plugin gone"),
		health("claim:nic/ib", "kube-rdma.io/claim=0d6c1a35-0000-4000-8000-0000000000b1-ib", "Healthy", ""),
		health("claim:gpu/cdi", "gpu.example.com/gpu=0", "Unhealthy", ""))
	p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "sidecar",
		AllocatedResourcesStatus: []corev1.ResourceStatus{health(ibRes, "b", "Healthy", "")}}}
	worst, hs := podHealth(&p, []string{ibRes})
	want := []DeviceHealth{
		{Container: "sidecar", Resource: ibRes, Device: "b", Health: "Healthy"},
		{Container: "main", Resource: ibRes, Device: "a", Health: "Healthy"},
		{Container: "main", Resource: "claim:nic/r", Device: "rdma.kube-rdma.io/n1/roce/d0", Health: "Unknown", Message: "plugin gone"},
		{Container: "main", Resource: "claim:nic/ib", Device: "kube-rdma.io/claim=0d6c1a35-0000-4000-8000-0000000000b1-ib", Health: "Healthy"},
	}
	if diff := cmp.Diff(want, hs); diff != "" || worst != "Unknown" {
		t.Errorf("worst %q, want Unknown; devices (-want +got):\n%s", worst, diff)
	}
	p.Status.ContainerStatuses[0].AllocatedResourcesStatus[0].Resources[0].Health = corev1.ResourceHealthStatusUnhealthy
	if worst, _ := podHealth(&p, []string{ibRes}); worst != "Unhealthy" {
		t.Errorf("one device Unhealthy, one Unknown: worst %q, want Unhealthy", worst)
	}
	if c := healthCheck(&p, []string{ibRes}); c.Verdict != Warn {
		t.Errorf("doctor's check with an Unhealthy device: %+v, want warn", c)
	}
}
