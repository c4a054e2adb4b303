package nodepools

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

var golden = File{Pools: []Pool{
	{Name: "gpu-nics", Mode: "exclusive", Frontend: "devicePlugin", Devices: []Device{{"mlx5_0", "0000:3b:00.0"}, {"mlx5_1", "0000:3b:00.1"}}},
	{Name: "soft", Mode: "shared", Frontend: "devicePlugin", Devices: []Device{{RDMA: "rxe0"}}},
}}

func readGolden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/pools-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenV1: testdata/pools-v1.json (version 1, the first) reads as
// written, and Marshal of what was read, its pools given in another order,
// writes the same bytes: the next version's reader keeps this file as its
// previous version's golden.
func TestGoldenV1(t *testing.T) {
	path := Path(t.TempDir())
	if err := Write(path, readGolden(t)); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(golden, got); diff != "" {
		t.Fatalf("Read (-want +got)\n%s", diff)
	}
	got.Pools[0], got.Pools[1] = got.Pools[1], got.Pools[0]
	got.Pools[1].Devices[0], got.Pools[1].Devices[1] = got.Pools[1].Devices[1], got.Pools[1].Devices[0]
	b, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(readGolden(t)), string(b)); diff != "" {
		t.Errorf("Marshal (-golden +got)\n%s", diff)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("pools file: %v, %v; want mode 0644", fi, err)
	}
}

// TestNewerRefused: a file of version 2 is refused naming the file, both
// versions and what to do; a missing file is fs.ErrNotExist.
func TestNewerRefused(t *testing.T) {
	path := Path(t.TempDir())
	if err := Write(path, []byte(strings.Replace(string(readGolden(t)), `"version": 1`, `"version": 2`, 1))); err != nil {
		t.Fatal(err)
	}
	_, err := Read(path)
	if !errors.Is(err, contractver.ErrNewer) {
		t.Fatalf("Read of version 2 = %v, want contractver.ErrNewer", err)
	}
	for _, want := range []string{"pools file " + path, "version 2 is newer", "reads (1)", contractver.Remedy} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), FileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file = %v, want fs.ErrNotExist", err)
	}
	if err := Write(path, []byte(`{"version":1,"pools":[{"devices":[]}]}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil {
		t.Error("Read of a pool without a name succeeded")
	}
}

func TestPoolOf(t *testing.T) {
	for _, tc := range []struct {
		name, rdma, pci string
		want            string
	}{
		{"by PCI address", "mlx5_9", "0000:3b:00.1", "gpu-nics"},
		{"PCI address in upper case", "", "0000:3B:00.0", "gpu-nics"},
		{"PCI address in no pool, RDMA name of a member", "mlx5_0", "0000:5e:00.0", ""},
		{"soft device by name", "rxe0", "", "soft"},
		{"hardware member named without a PCI address", "mlx5_1", "", "gpu-nics"},
		{"in no pool", "mlx5_7", "0000:af:00.0", ""},
		{"nothing", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := golden.PoolOf(tc.rdma, tc.pci)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("PoolOf(%q, %q) = %q, %v; want %q", tc.rdma, tc.pci, got, ok, tc.want)
			}
		})
	}
}

func TestSharedSlot(t *testing.T) {
	f := golden
	f.Pools = append(slices.Clone(f.Pools), Pool{Name: "dra-shared", Mode: ModeShared, Frontend: "dra"},
		Pool{Name: "roce-2", Mode: ModeShared, Frontend: "devicePlugin"})
	for _, tc := range []struct {
		id, want string
	}{
		{SlotID("soft", 0), "soft"},
		{"soft-17", "soft"},
		{SlotID("roce-2", 3), "roce-2"}, // a pool name with a dash and a number
		{"roce-2", ""},                  // not a slot: pool "roce" does not exist
		{"gpu-nics-0", ""},              // exclusive
		{"dra-shared-0", ""},            // not a device plugin pool
		{"soft-", ""},
		{"soft-x", ""},
		{"-0", ""},
		{"mlx5_0", ""},
	} {
		p, ok := f.SharedSlot(tc.id)
		if p.Name != tc.want || ok != (tc.want != "") {
			t.Errorf("SharedSlot(%q) = %q, %v; want %q", tc.id, p.Name, ok, tc.want)
		}
	}
}
