package nodestate

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// claimRec is a record of claim ns/name with the pods' UIDs and devices.
func claimRec(uid, ns, name string, pods []string, devs ...claimrecord.Device) claimrecord.Record {
	return claimrecord.Record{UID: uid, Namespace: ns, Name: name, PodUIDs: pods, Devices: devs}
}

func claimDev(req, pool, dev, rdma, pci string) claimrecord.Device {
	return claimrecord.Device{Request: req, Pool: pool, Device: dev, RDMA: rdma, PCIAddress: pci}
}

// TestBuildClaims: the records as status.claims, sorted; pods named by
// the CNI's complete attachment records of their UIDs; devices found by
// PCI address (a rename since Prepare shows) or kept by their name at
// Prepare when gone; shares counted per device, an adminAccess device and
// a second request of one claim on the same device not counted again.
func TestBuildClaims(t *testing.T) {
	admin := claimDev("mon", "n1/roce", "pci-0000-81-00-2", "mlx5_30", "0000:81:00.2")
	admin.AdminAccess = true
	recs := []claimrecord.Record{
		claimRec("u-c", "train", "shared-b", []string{"p3"}, claimDev("nic", "n1/roce", "pci-0000-81-00-2", "mlx5_30", "0000:81:00.2")),
		claimRec("u-a", "train", "ib-a", []string{"p2", "p1", "p2"},
			claimDev("nic", "n1/ib", "pci-0000-19-00-0", "mlx5_9", "0000:19:00.0"),  // renamed mlx5_9 -> mlx5_2
			claimDev("gone", "n1/ib", "pci-0000-99-00-0", "mlx5_7", "0000:99:00.0"), // no longer on the node
			admin),
		claimRec("u-b", "train", "shared-a", nil,
			claimDev("nic", "n1/roce", "pci-0000-81-00-2", "mlx5_30", "0000:81:00.2"),
			claimDev("nic2", "n1/roce", "pci-0000-81-00-2", "mlx5_30", "0000:81:00.2")),
		claimRec("u-d", "ops", "x", nil),
	}
	atts := []attachment.Attachment{
		{Complete: true, Pod: &attachment.PodRef{Namespace: "train", Name: "worker-1", UID: "p1"}},
		{Complete: false, Pod: &attachment.PodRef{Namespace: "train", Name: "half", UID: "p2"}},
	}
	st := Build(Input{View: testView(), Claims: recs, Attachments: atts, Now: now})
	want := []v1alpha1.Claim{
		{Namespace: "ops", Name: "x", UID: "u-d", Devices: []v1alpha1.ClaimDevice{}},
		{Namespace: "train", Name: "ib-a", UID: "u-a", Pods: []v1alpha1.ClaimPod{{UID: "p1", Name: "worker-1"}, {UID: "p2"}},
			Devices: []v1alpha1.ClaimDevice{
				{Request: "nic", Pool: "n1/ib", Device: "pci-0000-19-00-0", RDMADevice: "mlx5_2"},
				{Request: "gone", Pool: "n1/ib", Device: "pci-0000-99-00-0", RDMADevice: "mlx5_7"},
				{Request: "mon", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMADevice: "mlx5_30", AdminAccess: true},
			}},
		{Namespace: "train", Name: "shared-a", UID: "u-b", Devices: []v1alpha1.ClaimDevice{
			{Request: "nic", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMADevice: "mlx5_30"},
			{Request: "nic2", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMADevice: "mlx5_30"},
		}},
		{Namespace: "train", Name: "shared-b", UID: "u-c", Pods: []v1alpha1.ClaimPod{{UID: "p3"}}, Devices: []v1alpha1.ClaimDevice{
			{Request: "nic", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMADevice: "mlx5_30"},
		}},
	}
	if diff := cmp.Diff(want, st.Claims); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	shares := map[string]*v1alpha1.Shares{}
	for _, d := range st.Devices {
		shares[d.Name] = d.Shares
	}
	wantShares := map[string]*v1alpha1.Shares{"mlx5_2": {Used: 1}, "mlx5_10": nil, "mlx5_30": {Used: 2}}
	if diff := cmp.Diff(wantShares, shares); diff != "" {
		t.Errorf("devices' shares (-want +got):\n%s", diff)
	}
	if st.Summary.Claims != 4 {
		t.Errorf("summary.claims %d, want 4", st.Summary.Claims)
	}
	if st := Build(Input{View: testView(), Now: now}); st.Claims != nil || st.Summary.Claims != 0 || st.Devices[0].Shares != nil {
		t.Errorf("no records: claims %v, summary.claims %d, shares %v", st.Claims, st.Summary.Claims, st.Devices[0].Shares)
	}
}

// TestBuildClaimsBounds: at most MaxClaims claims, MaxClaimItems pods and
// devices each.
func TestBuildClaimsBounds(t *testing.T) {
	var recs []claimrecord.Record
	for i := range MaxClaims + 5 {
		r := claimRec(string(rune('a'+i%26))+time.Duration(i).String(), "ns", "c", nil)
		for j := range MaxClaimItems + 1 {
			r.PodUIDs = append(r.PodUIDs, time.Duration(j).String())
			r.Devices = append(r.Devices, claimDev("r", "n1/ib", "d", "mlx5_2", "0000:19:00.0"))
		}
		recs = append(recs, r)
	}
	st := Build(Input{View: testView(), Claims: recs, Now: now})
	if len(st.Claims) != MaxClaims || len(st.Claims[0].Pods) != MaxClaimItems || len(st.Claims[0].Devices) != MaxClaimItems {
		t.Errorf("%d claims, %d pods, %d devices: want %d, %d, %d", len(st.Claims), len(st.Claims[0].Pods), len(st.Claims[0].Devices),
			MaxClaims, MaxClaimItems, MaxClaimItems)
	}
}

// dirClaims reads a real claim records directory as the daemon's lister
// does (cmd/device-plugin claimRecords): damaged files moved aside and
// kept for the test to see, no directory no claims.
type dirClaims struct {
	dir     string
	mu      sync.Mutex
	damaged []claimrecord.Damaged
	calls   int
}

func (c *dirClaims) Claims() ([]claimrecord.Record, error) {
	recs, damaged, err := claimrecord.ReadAll(c.dir)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.damaged, c.calls = append(c.damaged, damaged...), c.calls+1
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return recs, err
}

func (c *dirClaims) state() (damaged []claimrecord.Damaged, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.damaged, c.calls
}

// TestPublisherClaims: claim records in a real directory show at the next
// poll and go with Unprepare; a torn record costs only itself (moved to
// quarantine/, the others published); a record of a newer version keeps
// the last good list and says so in the report; a steady node writes
// nothing however often the records are read.
func TestPublisherClaims(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	src, w, lister := newFakeSource(testView()), &fakeWriter{}, &dirClaims{dir: dir}
	p := startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, Claims: lister, Interval: 10 * time.Millisecond, PodPoll: 20 * time.Millisecond})
	eventually(t, "the first write, before the directory exists", 5*time.Second, func() bool { return w.count() >= 1 })
	if c := w.last().Claims; c != nil {
		t.Fatalf("claims %v before any record", c)
	}

	// The torn record first: a poll that lists the directory after the good one is there
	// sees both (written the other way round, a poll between the two can publish the claim
	// before the torn record exists, and the checks below can run before the next).
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	torn := claimrecord.Path(dir, "u-torn")
	if err := os.WriteFile(torn, []byte(`{"version":2,"uid":"u-torn","namesp`), 0o600); err != nil {
		t.Fatal(err)
	}
	a := claimRec("u-a", "train", "ib-a", []string{"p1"}, claimDev("nic", "n1/ib", "pci-0000-19-00-0", "mlx5_2", "0000:19:00.0"))
	if err := claimrecord.Write(dir, a); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a write with the claim", 5*time.Second, func() bool { return len(w.last().Claims) == 1 })
	if got := w.last().Claims[0]; got.UID != "u-a" || got.Devices[0].RDMADevice != "mlx5_2" {
		t.Errorf("claim %+v", got)
	}
	if s := w.last().Devices[0].Shares; s == nil || s.Used != 1 {
		t.Errorf("mlx5_2's shares %+v, want 1 used", s)
	}
	damaged, _ := lister.state()
	if len(damaged) != 1 || damaged[0].Path != torn || damaged[0].Moved == "" {
		t.Errorf("damaged %+v, want the torn record moved aside", damaged)
	}
	if _, err := os.Stat(torn); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("torn record still in place: %v", err)
	}

	// Steady: several polls read the records again, nothing is written.
	writes := w.count()
	_, calls := lister.state()
	eventually(t, "three more polls", 5*time.Second, func() bool { _, n := lister.state(); return n >= calls+3 })
	if n := w.count(); n != writes {
		t.Errorf("%d writes on a steady node after %d, want none", n-writes, writes)
	}

	// A record of a newer version: the whole read fails, the last good
	// list stays, the report says why; then it goes and all is well.
	newer := claimrecord.Path(dir, "u-new")
	if err := os.WriteFile(newer, []byte(`{"version":99,"uid":"u-new"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the error reported", 5*time.Second, func() bool { return p.Report().ClaimRecordsError != "" })
	if n := len(w.last().Claims); n != 1 {
		t.Errorf("%d claims while the records do not read, want the last good 1", n)
	}
	if err := os.Remove(newer); err != nil {
		t.Fatal(err)
	}
	if err := claimrecord.Remove(dir, "u-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a write without the claim", 5*time.Second, func() bool { return len(w.last().Claims) == 0 })
	if s := w.last().Devices[0].Shares; s != nil {
		t.Errorf("mlx5_2's shares %+v after Unprepare, want none", s)
	}
	if r := p.Report(); r.ClaimRecordsError != "" {
		t.Errorf("report after the records read again: %+v", r)
	}
}

// TestBuildSharedDRACapacity: the members of a shared dra pool show the
// claims they take at once (the pool's slots) beside the claims holding
// them, also when none does; an exclusive dra pool's show no capacity.
func TestBuildSharedDRACapacity(t *testing.T) {
	v := testView()
	v.DRAPools = []agent.PoolView{
		{Name: "roce-dra", Mode: config.Shared, Slots: 3, Members: []string{"mlx5_30", "mlx5_10"}},
		{Name: "ib-dra", Mode: config.Exclusive, Members: []string{"mlx5_2"}},
	}
	dev := func(share string) claimrecord.Device {
		d := claimDev("nic", "n1/roce-dra", "pci-0000-81-00-2", "mlx5_30", "0000:81:00.2")
		d.ShareID = share
		return d
	}
	recs := []claimrecord.Record{claimRec("u-a", "ns", "a", nil, dev("s-a")), claimRec("u-b", "ns", "b", nil, dev("s-b"))}
	st := Build(Input{View: v, Claims: recs, Now: now})
	shares := map[string]*v1alpha1.Shares{}
	for _, d := range st.Devices {
		shares[d.Name] = d.Shares
	}
	want := map[string]*v1alpha1.Shares{"mlx5_30": {Used: 2, Capacity: 3}, "mlx5_10": {Capacity: 3}, "mlx5_2": nil}
	if diff := cmp.Diff(want, shares); diff != "" {
		t.Errorf("devices' shares (-want +got):\n%s", diff)
	}
}
