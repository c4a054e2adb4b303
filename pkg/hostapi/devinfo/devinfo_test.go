package devinfo_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/devinfo"
)

func TestFileName(t *testing.T) {
	for _, tt := range []struct{ resource, id, want string }{
		{"rdma.kube-rdma.io/vf", "0000:3b:00.2", "rdma.kube-rdma.io-vf-0000:3b:00.2-device.json"},
		{"rdma.kube-rdma.io/hca", "mlx5_core.sf.2", "rdma.kube-rdma.io-hca-mlx5_core.sf.2-device.json"},
		{"a/b", "x/y", "a-b-x-y-device.json"},
	} {
		if got := devinfo.FileName(tt.resource, tt.id); got != tt.want {
			t.Errorf("FileName(%q, %q) = %q, want %q", tt.resource, tt.id, got, tt.want)
		}
	}
}

// The bytes are the spec's: the field names Multus's reader
// (network-attachment-definition-client's v1.DeviceInfo) decodes.
func TestSaveWritesSpecJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "devinfo", "dp")
	info := devinfo.NewPCI(devinfo.PCI{PCIAddress: "0000:3b:00.2", RDMADevice: "mlx5_4", PFPCIAddress: "0000:3b:00.0"})
	if err := devinfo.Save(dir, "rdma.kube-rdma.io/vf", "0000:3b:00.2", info); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rdma.kube-rdma.io-vf-0000:3b:00.2-device.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"pci","version":"1.1.0","pci":{"pci-address":"0000:3b:00.2","rdma-device":"mlx5_4","pf-pci-address":"0000:3b:00.0"}}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("file (-want +got):\n%s", diff)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	got, err := devinfo.Load(dir, "rdma.kube-rdma.io/vf", "0000:3b:00.2")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(info, got); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries, want the file alone (no temp file left)", len(entries))
	}
}

func TestSaveReplacesAndRemove(t *testing.T) {
	dir := t.TempDir()
	r, id := "rdma.kube-rdma.io/vf", "0000:3b:00.2"
	for _, rdma := range []string{"mlx5_4", "mlx5_9", "mlx5_9"} {
		if err := devinfo.Save(dir, r, id, devinfo.NewPCI(devinfo.PCI{PCIAddress: id, RDMADevice: rdma})); err != nil {
			t.Fatal(err)
		}
		got, err := devinfo.Load(dir, r, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.PCI.RDMADevice != rdma {
			t.Errorf("rdma-device %q, want %q", got.PCI.RDMADevice, rdma)
		}
	}
	if err := devinfo.Remove(dir, r, id); err != nil {
		t.Fatal(err)
	}
	if _, err := devinfo.Load(dir, r, id); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load after Remove: %v, want not exist", err)
	}
	if err := devinfo.Remove(dir, r, id); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
}

func TestLoadRefusesOtherMajor(t *testing.T) {
	dir := t.TempDir()
	name := devinfo.FileName("r/x", "d")
	if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"type":"pci","version":"2.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := devinfo.Load(dir, "r/x", "d"); !errors.Is(err, devinfo.ErrVersion) {
		t.Errorf("Load: %v, want ErrVersion", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:01:00.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := devinfo.Load(dir, "r/x", "d"); err != nil {
		t.Errorf("Load of 1.0.0: %v, want nil", err)
	}
}
