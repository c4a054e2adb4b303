package attachment

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// goldenBoot and goldenKey are those of testdata/attachment-v1.json, a
// record as the CNI plugin wrote it in schema 1 (Store.Save).
const goldenBoot = "6f1c2a0e-3d4b-4c5d-8e9f-0a1b2c3d4e5f"

var goldenKey = Key{"3f2a9c0b7d1e", "net1"}

func goldenStore(t *testing.T, data []byte) Store {
	t.Helper()
	s := Store{Dir: t.TempDir(), BootID: goldenBoot}
	if err := os.WriteFile(filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return s
}

func readGolden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/attachment-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenV1: this binary reads the record main wrote, and writes the
// same bytes back (version 1 is still the current one).
func TestGoldenV1(t *testing.T) {
	golden := readGolden(t)
	s := goldenStore(t, golden)
	got, err := s.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	want := Attachment{Schema: 1, BootID: goldenBoot, Key: goldenKey,
		Pod:   &PodRef{Namespace: "team-a", Name: "trainer-0", UID: "0d6b3c1e-0000-4000-8000-0000000000aa"},
		Netns: "/var/run/netns/cni-1234", CNIVersion: "1.1.0", Network: "rdma-gpu",
		Devices: []Device{
			{RDMA: "mlx5_0", PCIAddress: "0000:3b:00.0", Host: HostLink{Name: "ens1f0np0", Index: 7, MTU: 4200, MAC: "b8:ce:f6:00:00:01", Up: true},
				PodIfName: "net1", PodMAC: "b8:ce:f6:00:00:01", RDMAExclusive: true, IPAM: true},
			{RDMA: "rxe0", Host: HostLink{Name: "veth9", Index: 12, MTU: 1500, MAC: "02:00:00:00:00:09"},
				PodIfName: "net2", SoftType: "rxe", PodRDMA: "rxe0", Returned: true},
		},
		Complete: true,
		Binding: &Binding{Pool: "gpu-nics",
			Pairs:    []BindingPair{{GPU: "0000:3a:00.0", GPUID: "GPU-0", NIC: "mlx5_0", Level: "PIX"}, {GPU: "0000:5d:00.0", GPUID: "GPU-1"}},
			AllocIDs: []string{"b5871414ab800ca8"}},
	}
	var ipam bytes.Buffer
	if err := json.Compact(&ipam, got.IPAMConf); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"type":"host-local","ranges":[[{"subnet":"10.56.0.0/16"}]]}`, ipam.String()); diff != "" {
		t.Errorf("ipamConf (-want +got)\n%s", diff)
	}
	got.IPAMConf = nil
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load (-want +got)\n%s", diff)
	}
	got.IPAMConf = json.RawMessage(ipam.String())
	if err := s.Save(got); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(golden), string(again)); diff != "" {
		t.Errorf("Save of the record read differs from what main wrote (-main +now)\n%s", diff)
	}
}

// TestNewerRefused: a record of a newer schema (3) is an error that names
// both versions; it is not taken for a missing or stale record, List
// leaves it in place (not in quarantine) and HasRecords counts it (the
// binary stays).
func TestNewerRefused(t *testing.T) {
	newer := bytes.Replace(readGolden(t), []byte(`"schema": 1,`), []byte(`"schema": 3,`), 1)
	s := goldenStore(t, newer)
	path := filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json")
	_, err := s.Load(goldenKey)
	if !errors.Is(err, contractver.ErrNewer) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrStale) {
		t.Fatalf("Load of schema 3 = %v, want contractver.ErrNewer only", err)
	}
	for _, want := range []string{"attachment record " + path, "version 3 is newer", "reads (2 and 1)", contractver.Remedy} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	recs, prev, err := s.List()
	if !errors.Is(err, contractver.ErrNewer) || len(recs) != 0 || len(prev) != 0 {
		t.Errorf("List = %v, %v, %v; want no record and contractver.ErrNewer", recs, prev, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("List removed the newer record: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, QuarantineDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a newer record was taken for a torn one: quarantine dir %v", err)
	}
	if has, err := s.HasRecords(); !has || err != nil {
		t.Errorf("HasRecords = %v, %v; want true", has, err)
	}
	// A record without a schema predates every release: refused too.
	var m map[string]any
	if err := json.Unmarshal(readGolden(t), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "schema")
	b, _ := json.Marshal(m)
	if _, err := goldenStore(t, b).Load(goldenKey); !errors.Is(err, contractver.ErrOlder) {
		t.Errorf("Load of a record without schema = %v, want contractver.ErrOlder", err)
	}
}

// TestGoldenOfPreviousBoot: after a reboot, the record main wrote is not
// removed but listed apart, whole, with what an IPAM release needs (the
// container ID, the pod interfaces, the IPAM configuration); a failed
// release noted on it keeps version 1 and the old boot ID (a reader of
// version 1 decodes without refusing unknown keys, so it reads the record
// as before: docs/upgrades.md).
func TestGoldenOfPreviousBoot(t *testing.T) {
	s := goldenStore(t, readGolden(t))
	s.BootID = "a-later-boot"
	cur, prev, err := s.List()
	if err != nil || len(cur) != 0 || len(prev) != 1 {
		t.Fatalf("List = %v, %v, %v; want the golden record apart", cur, prev, err)
	}
	rec := prev[0]
	var ifs []string
	for _, d := range rec.Devices {
		ifs = append(ifs, d.PodIfName)
	}
	if diff := cmp.Diff([]string{"net1", "net2"}, ifs); diff != "" || rec.ContainerID != goldenKey.ContainerID || len(rec.IPAMConf) == 0 {
		t.Errorf("record of a previous boot lacks what IPAM DEL needs: %+v (-want +got ifnames)\n%s", rec, diff)
	}
	rec.Release = &Release{Tries: 1, Since: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Err: "boom"}
	if err := s.SavePrevious(rec); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v1 map[string]json.RawMessage
	if err := json.Unmarshal(b, &v1); err != nil {
		t.Fatal(err)
	}
	if string(v1["schema"]) != "1" || string(v1["bootID"]) != `"`+goldenBoot+`"` {
		t.Errorf("noted record has schema %s, boot %s; want 1 and the old boot", v1["schema"], v1["bootID"])
	}
	again, err := s.LoadPrevious(goldenKey)
	if err != nil || again.Release == nil || again.Release.Tries != 1 {
		t.Errorf("LoadPrevious = %+v, %v; want the release noted", again.Release, err)
	}
}

// TestGoldenV2Child: a record with a child netdev is schema 2; this binary
// reads it and writes the same bytes back, and a reader of the previous
// release (schema 1 only: main's TestNewerRefused) refuses it by name
// instead of taking the child for a moved netdev. Every other record is
// still written as schema 1 (TestGoldenV1), which that reader reads.
func TestGoldenV2Child(t *testing.T) {
	golden, err := os.ReadFile("testdata/attachment-v2-child.json")
	if err != nil {
		t.Fatal(err)
	}
	k := Key{"7c1d0e5a9b2f", "eth0"}
	s := Store{Dir: t.TempDir(), BootID: goldenBoot}
	path := filepath.Join(s.Dir, "7c1d0e5a9b2f_eth0.json")
	if err := os.WriteFile(path, golden, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(k)
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{{RDMA: "mlx5_2", PCIAddress: "0000:5e:00.0",
		Host:      HostLink{Name: "ens2f0np0", Index: 9, MTU: 9000, MAC: "b8:ce:f6:00:00:02", Up: true},
		PodIfName: "net1", PodMAC: "02:42:ac:11:00:07", IPAM: true, Child: "macvlan"}}
	if diff := cmp.Diff(want, got.Devices); diff != "" || got.Schema != 2 {
		t.Errorf("Load: schema %d, devices (-want +got)\n%s", got.Schema, diff)
	}
	var ipam bytes.Buffer
	if err := json.Compact(&ipam, got.IPAMConf); err != nil {
		t.Fatal(err)
	}
	got.IPAMConf = json.RawMessage(ipam.String())
	if err := s.Save(got); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(golden), string(again)); diff != "" {
		t.Errorf("Save of the record read differs from the golden one (-golden +now)\n%s", diff)
	}
	previous := contractver.Format{Kind: "attachment record", Key: "schema", First: 1, Current: VersionMoved}
	if _, err := previous.Check(path, again); !errors.Is(err, contractver.ErrNewer) {
		t.Errorf("a reader of schema 1 on a child record: %v, want contractver.ErrNewer", err)
	}
	// The same attachment without its child is a moved netdev: schema 1.
	got.Devices[0].Child = ""
	if err := s.Save(got); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"schema": 1,`)) {
		t.Errorf("a record without a child is not schema 1:\n%s", b)
	}
	// ... which a rollback to the previous release reads.
	if v, err := previous.Check(path, b); err != nil || v != VersionMoved {
		t.Errorf("a reader of schema 1 on a record without a child: version %d, %v", v, err)
	}
}

// TestNewerChildRefused: a child record of a newer schema (3) is refused as
// the moved one is (TestNewerRefused), with contractver's message.
func TestNewerChildRefused(t *testing.T) {
	golden, err := os.ReadFile("testdata/attachment-v2-child.json")
	if err != nil {
		t.Fatal(err)
	}
	newer := bytes.Replace(golden, []byte(`"schema": 2,`), []byte(`"schema": 3,`), 1)
	s := Store{Dir: t.TempDir(), BootID: goldenBoot}
	path := filepath.Join(s.Dir, "7c1d0e5a9b2f_eth0.json")
	if err := os.WriteFile(path, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Load(Key{"7c1d0e5a9b2f", "eth0"})
	if !errors.Is(err, contractver.ErrNewer) {
		t.Fatalf("Load of a child record of schema 3 = %v, want contractver.ErrNewer", err)
	}
	for _, want := range []string{"attachment record " + path, "version 3 is newer", "reads (2 and 1)", contractver.Remedy} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestIPsInVersion1: a device's ips are written under schema 1, read back,
// and the record main wrote, with the key added, reads as before plus the
// addresses (a reader of version 1 decodes without refusing unknown keys:
// it reads the record as main wrote it).
func TestIPsInVersion1(t *testing.T) {
	golden := readGolden(t)
	withIPs := bytes.Replace(golden, []byte(`"podIfName": "net1",`), []byte(`"podIfName": "net1", "ips": ["10.56.0.7/16", "fd00::7/64"],`), 1)
	if bytes.Equal(withIPs, golden) {
		t.Fatal("golden record has no podIfName net1")
	}
	s := goldenStore(t, withIPs)
	got, err := s.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"10.56.0.7/16", "fd00::7/64"}, got.Devices[0].IPs); diff != "" {
		t.Errorf("ips (-want +got)\n%s", diff)
	}
	if err := s.Save(got); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v1 map[string]json.RawMessage
	if err := json.Unmarshal(b, &v1); err != nil {
		t.Fatal(err)
	}
	if string(v1["schema"]) != "1" {
		t.Errorf("record with ips has schema %s, want 1", v1["schema"])
	}
	// What main's reader gets: the record without the key.
	old := goldenStore(t, golden)
	want, err := old.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	got.Devices[0].IPs = nil
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b json.RawMessage) bool { return true })); diff != "" {
		t.Errorf("record with ips, less them (-golden +got)\n%s", diff)
	}
}

// TestNewerFieldsKept: a record of this schema that a newer release wrote
// with fields this binary does not know (testdata/attachment-v1-newer-
// fields.json: two at the top, two in a device, one of them an object), as
// an older binary meets it after a rollback or beside a newer plugin. Read
// and saved again it is unchanged; saved after this binary changed a field
// it knows (a device returned), only that field changed; a field it knows
// and cleared stays cleared.
func TestNewerFieldsKept(t *testing.T) {
	in, err := os.ReadFile("testdata/attachment-v1-newer-fields.json")
	if err != nil {
		t.Fatal(err)
	}
	s := goldenStore(t, in)
	rec, err := s.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.Dir, "3f2a9c0b7d1e_net1.json")
	asJSON := func(b []byte) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%v:\n%s", err, b)
		}
		return v
	}
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(path)
	if diff := cmp.Diff(asJSON(in), asJSON(out)); diff != "" {
		t.Errorf("read and saved again (-read +written):\n%s", diff)
	}
	// Saved once more it is byte for byte what the first save wrote.
	rec2, err := s.Load(goldenKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(rec2); err != nil {
		t.Fatal(err)
	}
	if out2, _ := os.ReadFile(path); !bytes.Equal(out, out2) {
		t.Errorf("second save differs:\n%s\n---\n%s", out, out2)
	}

	rec.Devices[0].Returned = true
	rec.Pod = nil // a known field cleared stays cleared
	if err := s.Save(rec); err != nil {
		t.Fatal(err)
	}
	out, _ = os.ReadFile(path)
	want := asJSON(in)
	want["devices"].([]any)[0].(map[string]any)["returned"] = true
	delete(want, "pod")
	if diff := cmp.Diff(want, asJSON(out)); diff != "" {
		t.Errorf("after this binary changed what it knows (-want +written):\n%s", diff)
	}
}
