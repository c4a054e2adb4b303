package dra

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// TestPrepareRecordsReservedPods: the kubelet's claim object goes into the
// record with the UIDs of its reservedFor pods (other consumers left out)
// and the RDMA device of each result of our driver (other drivers' left
// out), as the gRPC handler gets it from the kubeletplugin helper.
func TestPrepareRecordsReservedPods(t *testing.T) {
	dev := discovery.RDMADevice{Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0"}
	devs, _ := Devices([]discovery.RDMADevice{dev}, map[string]bool{"mlx5_0": true})
	ix := &Index{}
	ix.Add("node-a/nics", devs)
	dir := t.TempDir()
	d := &Driver{index: ix}
	d.prep = &Preparer{CDIDir: t.TempDir(), StateDir: dir, DevRoot: t.TempDir(), Devices: ix}
	d.log = slog.New(slog.DiscardHandler)
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "ns", UID: "claim-1"}}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: DriverName, Pool: "node-a/nics", Device: "pci-0000-18-00-0"},
		{Request: "gpu", Driver: "gpu.example.com", Pool: "node-a", Device: "gpu-0"},
	}}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{
		{Resource: "pods", Name: "p2", UID: "pod-2"},
		{APIGroup: "example.com", Resource: "pods", Name: "x", UID: "not-a-pod"},
		{Resource: "pods", Name: "p1", UID: "pod-1"},
	}
	if res := d.prepare(c); res.Err != nil {
		t.Fatal(res.Err)
	}
	recs, _, err := claimrecord.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []claimrecord.Record{{UID: "claim-1", Namespace: "ns", Name: "c1", PodUIDs: []string{"pod-1", "pod-2"},
		Devices: []claimrecord.Device{{Request: "nic", Pool: "node-a/nics", Device: "pci-0000-18-00-0", RDMA: "mlx5_0", PCIAddress: "0000:18:00.0"}}}}
	if diff := cmp.Diff(want, recs); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}
