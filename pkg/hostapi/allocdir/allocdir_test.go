package allocdir

import (
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAllocID(t *testing.T) {
	tests := []struct {
		name string
		ids  []string
		want string // printf '<sorted ids joined with ,>' | sha256sum | cut -c1-16
	}{
		{"sorted", []string{"gpu-nics-slot-0", "gpu-nics-slot-1"}, "b5871414ab800ca8"},
		{"order does not matter", []string{"gpu-nics-slot-1", "gpu-nics-slot-0"}, "b5871414ab800ca8"},
		{"string order, not numeric", []string{"gpu-nics-slot-2", "gpu-nics-slot-10"}, "24789de4692efbad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]string(nil), tt.ids...)
			got := AllocID(tt.ids)
			if got != tt.want {
				t.Errorf("AllocID(%q) = %s, want %s", tt.ids, got, tt.want)
			}
			if !IsAllocID(got) {
				t.Errorf("IsAllocID(%q) = false", got)
			}
			if diff := cmp.Diff(in, tt.ids); diff != "" {
				t.Errorf("input modified (-want +got)\n%s", diff)
			}
		})
	}
}

func TestIsAllocID(t *testing.T) {
	for _, name := range []string{"", "pool.json", "b5871414ab800ca", "b5871414ab800ca8a", "B5871414AB800CA8", "b5871414ab800cag"} {
		if IsAllocID(name) {
			t.Errorf("IsAllocID(%q) = true", name)
		}
	}
}

func TestSlotID(t *testing.T) {
	if got := SlotID("gpu-nics", 12); got != "gpu-nics-slot-12" {
		t.Errorf("SlotID = %q", got)
	}
	for id, want := range map[string]int{"gpu-nics-slot-0": 0, "gpu-nics-slot-12": 12} {
		if i, ok := SlotIndex("gpu-nics", id); !ok || i != want {
			t.Errorf("SlotIndex(%q) = %d, %v; want %d", id, i, ok, want)
		}
	}
	for _, id := range []string{"gpu-nics-slot-", "gpu-nics-slot-01", "gpu-nics-slot--1", "gpu-nics-slot-x", "other-slot-0", "gpu-nics-0"} {
		if i, ok := SlotIndex("gpu-nics", id); ok {
			t.Errorf("SlotIndex(%q) = %d, want not a slot", id, i)
		}
	}
}

func TestPaths(t *testing.T) {
	got := []string{
		PoolDir(DefaultRoot, "gpu-nics"), PoolFilePath(DefaultRoot, "gpu-nics"), AllocPath(DefaultRoot, "gpu-nics", "b5871414ab800ca8"),
		ContainerPath("gpu-nics"), ContainerNCCLConf("gpu-nics"), ContainerEnvFile("gpu-nics"),
	}
	want := []string{
		"/var/run/kube-rdma/alloc/gpu-nics", "/var/run/kube-rdma/alloc/gpu-nics/pool.json", "/var/run/kube-rdma/alloc/gpu-nics/b5871414ab800ca8",
		"/var/run/kube-rdma/gpu-nics", "/var/run/kube-rdma/gpu-nics/nccl.conf", "/var/run/kube-rdma/gpu-nics/env",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestPoolFileRoundTrip(t *testing.T) {
	root := t.TempDir()
	if _, err := ReadPoolFile(root, "gpu-nics"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	p := PoolFile{Pool: "gpu-nics", Resource: "rdma.example.com/gpu-nics", Binding: BindingGPUAligned, Members: []string{"mlx5_0", "mlx5_1"}}
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 2,
  "pool": "gpu-nics",
  "resource": "rdma.example.com/gpu-nics",
  "binding": "gpuAligned",
  "members": [
    "mlx5_0",
    "mlx5_1"
  ],
  "healthy": []
}
`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Errorf("encoding (-want +got)\n%s", diff)
	}
	if err := WritePoolFile(root, "gpu-nics", b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPoolFile(root, "gpu-nics")
	if err != nil {
		t.Fatal(err)
	}
	p.Healthy = []string{}
	if diff := cmp.Diff(p, got); diff != "" {
		t.Errorf("read back (-want +got)\n%s", diff)
	}
	if err := os.MkdirAll(PoolDir(root, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PoolFilePath(root, "other"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPoolFile(root, "other"); err == nil {
		t.Error("a pool file naming another pool was accepted")
	}
}

func TestEnvName(t *testing.T) {
	for pool, want := range map[string]string{"gpu-nics": "GPU_NICS", "GPU.nics_2": "GPU_NICS_2", "x": "X", "ib0": "IB0"} {
		if got := EnvName(pool); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", pool, got, want)
		}
	}
}
