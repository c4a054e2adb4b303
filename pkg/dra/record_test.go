package dra_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// readRecord reads a claim's record as the CNI plugin does.
func readRecord(t *testing.T, dir, uid string) (claimrecord.Record, bool) {
	t.Helper()
	recs, _, err := claimrecord.ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.UID == uid {
			return r, true
		}
	}
	return claimrecord.Record{}, false
}

// TestRecordCarriesPodsAndDevices: the record names the pods the claim is
// reserved for and, per result, the RDMA device, PCI address and the
// device ID the CNI resolves; a second Prepare with the same answer does
// not rewrite it, one whose reservedFor changed does.
func TestRecordCarriesPodsAndDevices(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	c := f.claim("uid-1", "ib:mlx5_1", "roce:mlx5_3")
	c.PodUIDs = []string{"pod-b", "pod-a", "pod-b", ""}
	if _, err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	rec, ok := readRecord(t, f.stateDir, "uid-1")
	if !ok {
		t.Fatal("no record")
	}
	dev := func(req, rdma string) claimrecord.Device {
		d := f.byRDMA[rdma]
		return claimrecord.Device{Request: req, Pool: pool, Device: d.API.Name, RDMA: rdma, PCIAddress: d.RDMA.PCIAddress, AuxDevice: d.RDMA.AuxDevice}
	}
	want := claimrecord.Record{UID: "uid-1", Namespace: "ns", Name: "claim-uid-1", PodUIDs: []string{"pod-a", "pod-b"},
		Devices: []claimrecord.Device{dev("ib", "mlx5_1"), dev("roce", "mlx5_3")}}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if rec.Devices[0].PCIAddress == "" || rec.Devices[0].ID() != rec.Devices[0].PCIAddress {
		t.Errorf("a PF's ID is %q, want its PCI address %q", rec.Devices[0].ID(), rec.Devices[0].PCIAddress)
	}
	if !rec.ForPod("pod-a") || rec.ForPod("pod-c") || rec.ForPod("") {
		t.Errorf("ForPod: pod-a %v, pod-c %v, \"\" %v", rec.ForPod("pod-a"), rec.ForPod("pod-c"), rec.ForPod(""))
	}

	// The kubelet retries Prepare: the same claim rewrites nothing.
	path := filepath.Join(f.stateDir, "uid-1.json")
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.preparer().Prepare(c); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Errorf("a second Prepare of the same claim replaced its record")
	}
	// reservedFor changed (a pod gone, another added): the record follows.
	c.PodUIDs = []string{"pod-c"}
	if _, err := p.Prepare(c); err != nil {
		t.Fatal(err)
	}
	if rec, _ := readRecord(t, f.stateDir, "uid-1"); !cmp.Equal(rec.PodUIDs, []string{"pod-c"}) {
		t.Errorf("pods after a new reservedFor: %v", rec.PodUIDs)
	}
}

// TestCrashBetweenRecordAndSpec: Prepare writes the record, then the spec.
// When the spec cannot be written (as if the daemon died in between) the
// claim is not prepared for the kubelet, which retries; the retry
// completes it, and Unprepare removes both. Nothing is left half-done
// that the next call does not finish or remove.
func TestCrashBetweenRecordAndSpec(t *testing.T) {
	f := newFixture(t)
	// A file where the CDI directory should be: the spec's write fails.
	if err := os.WriteFile(f.cdiDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := f.claim("uid-1", "nic:mlx5_0")
	c.PodUIDs = []string{"pod-a"}
	if _, err := f.preparer().Prepare(c); err == nil {
		t.Fatal("Prepare succeeded without a CDI directory")
	}
	if _, ok := readRecord(t, f.stateDir, "uid-1"); !ok {
		t.Fatal("no record after a failed spec write: Unprepare would not know the claim")
	}
	if err := os.Remove(f.cdiDir); err != nil {
		t.Fatal(err)
	}
	// A restarted daemon and the kubelet's retry.
	if _, err := f.preparer().Prepare(c); err != nil {
		t.Fatalf("retried Prepare: %v", err)
	}
	if _, ok := f.spec(t, "uid-1"); !ok {
		t.Error("retried Prepare wrote no spec")
	}
	// The kubelet gives up on the pod instead: Unprepare removes all.
	if err := f.preparer().Unprepare("uid-1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := readRecord(t, f.stateDir, "uid-1"); ok {
		t.Error("Unprepare left the record")
	}
	ents, _ := os.ReadDir(f.stateDir)
	for _, e := range ents {
		t.Errorf("left in the records dir: %s", e.Name())
	}
}

// TestClaimsDirDefault: the CNI's documented default dir is the one the
// driver uses with its default plugin dir.
func TestClaimsDirDefault(t *testing.T) {
	got := dra.ClaimsDir(filepath.Join(kubeletplugin.KubeletPluginsDir, dra.DriverName))
	if got != claimrecord.DefaultDir {
		t.Errorf("driver's claims dir %s, claimrecord.DefaultDir %s", got, claimrecord.DefaultDir)
	}
}
