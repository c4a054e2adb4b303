package attachment

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRecordRoundTrip(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "state")}
	a := Attachment{Key: Key{"c1", "net1"}, Netns: "/run/netns/p", CNIVersion: "1.1.0", Network: "rdma",
		Devices: []Device{{RDMA: "rxe0", Host: HostLink{Name: "veth0", Index: 7, MTU: 1500, MAC: "02:00:00:00:00:01", Up: true}, PodIfName: "net1", SoftType: "rxe", PodRDMA: "rxe0"}}}
	b := Attachment{Key: Key{"c2", "eth0"}, Devices: []Device{{RDMA: "mlx5_0"}, {RDMA: "mlx5_1"}}}
	for _, r := range []Attachment{a, b} {
		if err := s.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	a.Schema = VersionMoved
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	claims, prev, err := s.Claimed()
	if err != nil || len(prev) != 0 {
		t.Fatal(prev, err)
	}
	want := map[string]Key{"rxe0": a.Key, "mlx5_0": b.Key, "mlx5_1": b.Key}
	if diff := cmp.Diff(want, claims); diff != "" {
		t.Errorf("Claimed (-want +got):\n%s", diff)
	}
	for i := 0; i < 2; i++ { // Delete is idempotent
		if err := s.Delete(a.Key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Load(a.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load after Delete = %v, want ErrNotFound", err)
	}
	ents, _ := os.ReadDir(s.Dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"c2_eth0.json"}, names); diff != "" {
		t.Errorf("state dir holds (-want +got):\n%s", diff) // no temporary files left
	}
}

func TestKeyMustBePlain(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	for _, k := range []Key{{"../x", "net1"}, {"c", ""}, {"c", "a/b"}} {
		if err := s.Save(Attachment{Key: k}); err == nil {
			t.Errorf("Save(%v) succeeded", k)
		}
	}
}

func TestLockIsExclusive(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	unlock, err := s.Lock()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(s.Dir, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Errorf("second flock while held = %v, want EWOULDBLOCK", err)
	}
	unlock()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("flock after unlock = %v", err)
	}
}

// sameJSON compares JSON values, not their layout (Save indents).
var sameJSON = cmp.Comparer(func(a, b json.RawMessage) bool {
	var x, y bytes.Buffer
	return json.Compact(&x, a) == nil && json.Compact(&y, b) == nil && x.String() == y.String()
})

// TestStaleRecords: a record of another boot is no claim and stays on disk,
// listed apart with what its IPAM release needs, until removed; a failed
// release is noted on it without making it this boot's. A torn record is
// moved aside when listed (torn_test.go).
func TestStaleRecords(t *testing.T) {
	dir := t.TempDir()
	old := Store{Dir: dir, BootID: "boot-1"}
	rec := Attachment{Key: Key{"c1", "eth0"}, Network: "rdma", Netns: "/run/netns/p",
		IPAMConf: []byte(`{"name":"rdma","ipam":{"type":"host-local"}}`),
		Devices:  []Device{{RDMA: "mlx5_0", PodIfName: "net1", IPAM: true}, {RDMA: "mlx5_1", PodIfName: "net2"}}}
	if err := old.Save(rec); err != nil {
		t.Fatal(err)
	}
	// A record torn by a machine crash.
	if err := os.WriteFile(filepath.Join(dir, "c2_net1.json"), []byte(`{"schema":1,"dev`), 0o600); err != nil {
		t.Fatal(err)
	}
	cur := Store{Dir: dir, BootID: "boot-2"}
	if err := cur.Save(Attachment{Key: Key{"c3", "eth0"}, Devices: []Device{{RDMA: "mlx5_2"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := cur.Load(rec.Key); !errors.Is(err, ErrNotFound) {
		t.Errorf("Load of a record of another boot = %v, want ErrNotFound", err)
	}
	if _, err := cur.LoadPrevious(Key{"c3", "eth0"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadPrevious of a record of this boot = %v, want ErrNotFound", err)
	}
	claims, prev, err := cur.Claimed()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]Key{"mlx5_2": {"c3", "eth0"}}, claims); diff != "" {
		t.Errorf("Claimed (-want +got):\n%s", diff)
	}
	want := rec
	want.Schema, want.BootID = VersionMoved, "boot-1"
	if diff := cmp.Diff([]Attachment{want}, prev, sameJSON); diff != "" {
		t.Errorf("records of another boot (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(filepath.Join(dir, "c2_net1.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("torn record not moved aside: %v", err)
	}

	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	want.Release = &Release{Tries: 2, Since: since, Err: "ipam host-local del: boom"}
	if err := cur.SavePrevious(want); err != nil {
		t.Fatal(err)
	}
	got, err := cur.LoadPrevious(rec.Key)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, sameJSON); diff != "" {
		t.Errorf("LoadPrevious after SavePrevious (-want +got):\n%s", diff)
	}
	if err := cur.SavePrevious(Attachment{Key: Key{"c3", "eth0"}, BootID: "boot-2"}); err == nil {
		t.Error("SavePrevious of a record of this boot succeeded")
	}
	if err := cur.Delete(rec.Key); err != nil {
		t.Fatal(err)
	}
	if _, prev, err := cur.List(); err != nil || len(prev) != 0 {
		t.Errorf("List after Delete: previous %v, %v; want none", prev, err)
	}
}

func TestHasRecords(t *testing.T) {
	dir := t.TempDir()
	cur := Store{Dir: dir, BootID: "boot-2"}
	check := func(what string, want bool) {
		t.Helper()
		got, err := cur.HasRecords()
		if err != nil || got != want {
			t.Errorf("%s: HasRecords = %v, %v; want %v", what, got, err, want)
		}
	}
	check("empty dir", false)
	if got, err := (Store{Dir: filepath.Join(dir, "missing")}).HasRecords(); err != nil || got {
		t.Errorf("missing dir: HasRecords = %v, %v; want false", got, err)
	}
	for _, name := range []string{"lock", ".tmp-123", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := (Store{Dir: dir, BootID: "boot-1"}).Save(Attachment{Key: Key{"c1", "net1"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c2_net1.json"), []byte(`{"schema":1,"dev`), 0o600); err != nil {
		t.Fatal(err)
	}
	check("only other files and stale records", false)
	if ents, _ := os.ReadDir(dir); len(ents) != 5 {
		t.Errorf("HasRecords changed the directory: %v", ents)
	}
	if err := cur.Save(Attachment{Key: Key{"c3", "net1"}}); err != nil {
		t.Fatal(err)
	}
	check("a record of this boot", true)
}

func TestRecords(t *testing.T) {
	dir := t.TempDir()
	cur := Store{Dir: dir, BootID: "boot-2"}
	if got, err := (Store{Dir: filepath.Join(dir, "missing")}).Records(); err != nil || len(got) != 0 {
		t.Errorf("missing dir: Records = %v, %v; want none", got, err)
	}
	if err := (Store{Dir: dir, BootID: "boot-1"}).Save(Attachment{Key: Key{"c1", "net1"}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c2_net1.json"), []byte(`{"schema":1,"dev`), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := &PodRef{Namespace: "ns", Name: "p", UID: "u"}
	if err := cur.Save(Attachment{Key: Key{"c3", "net1"}, Pod: pod, Devices: []Device{{RDMA: "mlx5_0", PodIfName: "net1"}}}); err != nil {
		t.Fatal(err)
	}
	got, err := cur.Records()
	if err != nil || len(got) != 1 || got[0].Key != (Key{"c3", "net1"}) || *got[0].Pod != *pod {
		t.Errorf("Records = %+v, %v; want only c3/net1 of pod ns/p", got, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("Records changed the directory: %v", ents)
	}
}

func TestHold(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	k := Key{"c1", "net1"}
	release, ok, err := s.Hold(k, false)
	if err != nil || !ok {
		t.Fatalf("first Hold = %v, %v", ok, err)
	}
	if _, ok, err := s.Hold(k, false); err != nil || ok {
		t.Fatalf("second Hold without wait = %v, %v; want not ok", ok, err)
	}
	if r, ok, err := s.Hold(Key{"c2", "net1"}, false); err != nil || !ok {
		t.Fatalf("Hold of another attachment = %v, %v", ok, err)
	} else {
		r()
	}
	got := make(chan func(), 1)
	go func() {
		r, _, _ := s.Hold(k, true)
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("a waiting Hold returned while held")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case r := <-got:
		// The waiter holds a lock on the file at the path, not on the one the
		// first holder removed: a third holder is refused.
		if _, ok, _ := s.Hold(k, false); ok {
			t.Error("Hold succeeded while the waiter holds it")
		}
		r()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Hold did not get it after release")
	}
	if ents, _ := os.ReadDir(s.Dir); len(ents) != 0 {
		t.Errorf("hold files left: %v", ents)
	}
}

func TestReturnedDevicesAreNotClaimed(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	if err := s.Save(Attachment{Key: Key{"c1", "net1"}, Devices: []Device{{RDMA: "mlx5_0", Returned: true}, {RDMA: "mlx5_1"}}}); err != nil {
		t.Fatal(err)
	}
	claims, _, err := s.Claimed()
	if err != nil || len(claims) != 1 || claims["mlx5_1"] != (Key{"c1", "net1"}) {
		t.Errorf("Claimed = %v, %v; want only mlx5_1", claims, err)
	}
}

// TestBindingCompatible: the binding round-trips, and a record without one
// (every record written before the field existed) reads as before and
// writes no "binding" key.
func TestBindingCompatible(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	a := Attachment{Key: Key{"c1", "eth0"}, Devices: []Device{{RDMA: "mlx5_0", PodIfName: "net1"}},
		Binding: &Binding{Pool: "gpu-nics", AllocIDs: []string{"b5871414ab800ca8"},
			Pairs: []BindingPair{{GPU: "0000:13:00.0", GPUID: "GPU-1", NIC: "mlx5_0", Level: "PIX"}, {GPU: "0000:14:00.0", GPUID: "GPU-2"}}}}
	if err := s.Save(a); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(a.Key)
	if err != nil {
		t.Fatal(err)
	}
	a.Schema = VersionMoved
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	old := `{"schema":1,"containerID":"c2","ifName":"eth0","netns":"/run/netns/p","cniVersion":"1.1.0","network":"rdma",
		"devices":[{"rdma":"mlx5_1","host":{"name":"nic1","index":3,"mtu":1500,"mac":"","up":true},"podIfName":"net1"}],"complete":true}`
	if err := os.WriteFile(filepath.Join(s.Dir, "c2_eth0.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	prev, err := s.Load(Key{"c2", "eth0"})
	if err != nil || prev.Binding != nil || len(prev.Devices) != 1 {
		t.Fatalf("record without a binding: %+v, %v", prev, err)
	}
	if err := s.Save(prev); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(s.Dir, "c2_eth0.json"))
	if strings.Contains(string(b), `"binding"`) {
		t.Errorf("a record without a binding is written with one:\n%s", b)
	}
}

// TestSaveNoSync: a record saved without fsync is the same file, byte for
// byte, as Save writes, read back as it was, with no temporary file left.
func TestSaveNoSync(t *testing.T) {
	a := Attachment{Key: Key{"c1", "net1"}, Netns: "/run/netns/p", CNIVersion: "1.1.0", Network: "rdma",
		Devices: []Device{{RDMA: "mlx5_0", PodIfName: "net1"}}}
	synced, unsynced := Store{Dir: t.TempDir(), BootID: "b"}, Store{Dir: t.TempDir(), BootID: "b"}
	if err := synced.Save(a); err != nil {
		t.Fatal(err)
	}
	if err := unsynced.SaveNoSync(a); err != nil {
		t.Fatal(err)
	}
	name, _ := a.Key.file()
	want, err := os.ReadFile(filepath.Join(synced.Dir, name))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(unsynced.Dir, name))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("SaveNoSync wrote %q (%v), Save %q", got, err, want)
	}
	back, err := unsynced.Load(a.Key)
	if err != nil || back.Devices[0].RDMA != "mlx5_0" || back.BootID != "b" {
		t.Errorf("Load after SaveNoSync: %+v, %v", back, err)
	}
	ents, _ := os.ReadDir(unsynced.Dir)
	if len(ents) != 1 {
		t.Errorf("state dir holds %d entries, want the record alone", len(ents))
	}
}
