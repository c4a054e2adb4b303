package claimrecord

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

func TestReadAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	if _, _, err := ReadAll(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadAll of a missing dir = %v, want fs.ErrNotExist", err)
	}
	b := Record{UID: "b", PodUIDs: []string{"p1"}, Devices: []Device{{Request: "nic", Pool: "n/ib", Device: "pci-0000-01-00-0", PCIAddress: "0000:01:00.0"}}}
	a := Record{UID: "a", Devices: []Device{}}
	for _, r := range []Record{b, a} {
		if err := Write(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	// A write in flight (its temporary file) and other files are not records.
	for _, n := range []string{".kube-rdma-123.tmp", ".x.json", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, damaged, err := ReadAll(dir)
	if err != nil || len(damaged) != 0 {
		t.Fatal(err, damaged)
	}
	if diff := cmp.Diff([]Record{a, b}, got); diff != "" {
		t.Errorf("ReadAll (-want +got):\n%s", diff)
	}
	if err := Remove(dir, "b"); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir, "b"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestReadAllTorn: a record that does not decode costs only itself. main
// failed the whole read, and with it every ADD on the node (DRA chained
// mode, pods without a claim too) and every Prepare.
func TestReadAllTorn(t *testing.T) {
	dir := t.TempDir()
	good := Record{UID: "good", Devices: []Device{{Request: "nic", Pool: "n/ib", Device: "d0"}}}
	if err := Write(dir, good); err != nil {
		t.Fatal(err)
	}
	torn := map[string]string{"torn": `{"uid":"torn","dev`, "zero": "", "array": `[1]`, "badver": `{"version":"x"}`}
	for uid, data := range torn {
		if err := os.WriteFile(Path(dir, uid), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A file of that name quarantined before is kept.
	if err := os.MkdirAll(filepath.Join(dir, QuarantineDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, QuarantineDir, "torn.json"), []byte("earlier"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, damaged, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Record{good}, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if len(damaged) != len(torn) {
		t.Fatalf("damaged = %v, want %d", damaged, len(torn))
	}
	for _, d := range damaged {
		uid := strings.TrimSuffix(filepath.Base(d.Path), ".json")
		if d.Err == nil || d.Moved == "" || filepath.Dir(d.Moved) != filepath.Join(dir, QuarantineDir) {
			t.Errorf("%s: %+v, want moved to the quarantine dir with its cause", uid, d)
			continue
		}
		if data, err := os.ReadFile(d.Moved); err != nil || string(data) != torn[uid] {
			t.Errorf("%s: quarantined as %q, %v; want its content %q", d.Moved, data, err, torn[uid])
		}
		if _, err := os.Stat(d.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still in place: %v", d.Path, err)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(dir, QuarantineDir, "torn.json")); string(data) != "earlier" {
		t.Errorf("the earlier quarantined file was replaced: %q", data)
	}
	// Moved once: the next read sees only the good record.
	if got, damaged, err := ReadAll(dir); err != nil || len(damaged) != 0 || len(got) != 1 {
		t.Errorf("second ReadAll = %v, %v, %v; want the good record alone", got, damaged, err)
	}
	// A record of a newer version still fails the read, by name.
	if err := os.WriteFile(Path(dir, "newer"), []byte(`{"version":99,"uid":"newer"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadAll(dir); !errors.Is(err, contractver.ErrNewer) {
		t.Errorf("ReadAll with a newer record = %v, want ErrNewer", err)
	}
}

func TestCheckUID(t *testing.T) {
	for uid, ok := range map[string]bool{"5b1c0e4e-0000-4000-8000-000000000001": true, "": false, "..": false,
		"../x": false, `a\b`: false, ".hidden": false} {
		if err := CheckUID(uid); (err == nil) != ok {
			t.Errorf("CheckUID(%q) = %v", uid, err)
		}
		if !ok {
			if err := Write(t.TempDir(), Record{UID: uid}); err == nil {
				t.Errorf("Write of uid %q accepted", uid)
			}
		}
	}
}

func TestDeviceID(t *testing.T) {
	for _, tc := range []struct {
		d    Device
		want string
	}{
		{Device{RDMA: "mlx5_3", PCIAddress: "0000:3b:00.0"}, "0000:3b:00.0"},
		{Device{RDMA: "mlx5_9", PCIAddress: "0000:3b:00.0", AuxDevice: "mlx5_core.sf.2"}, "mlx5_core.sf.2"},
		{Device{RDMA: "rxe0"}, "rxe0"},
		{Device{}, ""},
	} {
		if got := tc.d.ID(); got != tc.want {
			t.Errorf("%+v: ID %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestOfPool(t *testing.T) {
	d := Device{Pool: DRAPool("node-a", "RDMA_Roce")}
	if d.Pool != "node-a/rdma-roce" {
		t.Errorf("DRAPool = %q, want node-a/rdma-roce", d.Pool)
	}
	for pool, want := range map[string]bool{"RDMA_Roce": true, "rdma_roce": true, "rdma": false, "": false, "node-a/rdma-roce": false} {
		if got := d.OfPool(pool); got != want {
			t.Errorf("OfPool(%q) = %v, want %v", pool, got, want)
		}
	}
	if (Device{Pool: "rdma-roce"}).OfPool("rdma_roce") {
		t.Error("a pool without a node part matched")
	}
}

func TestGetsNetdev(t *testing.T) {
	for _, c := range []struct {
		d            Device
		sharedNetdev bool
		want         bool
	}{
		{Device{}, false, true},
		{Device{}, true, true},
		{Device{AdminAccess: true}, true, false},
		{Device{ShareID: "s1"}, false, false},
		{Device{ShareID: "s1"}, true, true},
		{Device{ShareID: "s1", AdminAccess: true}, true, false},
	} {
		if got := c.d.GetsNetdev(c.sharedNetdev); got != c.want {
			t.Errorf("%+v.GetsNetdev(%v) = %v, want %v", c.d, c.sharedNetdev, got, c.want)
		}
	}
}
