package claimrecord

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadAll(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "claims")
	if _, err := ReadAll(dir); !errors.Is(err, fs.ErrNotExist) {
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
	got, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
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
	if err := os.WriteFile(Path(dir, "torn"), []byte(`{"uid":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAll(dir); err == nil {
		t.Error("a record that is not JSON was read")
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
