package cni

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

func TestMatchGPU(t *testing.T) {
	zero, three := 0, 3
	gpus := []discovery.GPU{
		{PCIAddress: "0000:13:00.0", UUID: "GPU-aaaa", Minor: &zero},
		{PCIAddress: "0000:14:00.0", UUID: "GPU-bbbb", Minor: &three},
		{PCIAddress: "0000:c1:00.0"}, // AMD: no UUID, no minor
	}
	for id, want := range map[string]string{
		"GPU-aaaa": "0000:13:00.0", "gpu-BBBB": "0000:14:00.0", "3": "0000:14:00.0", "0": "0000:13:00.0",
		"0000:C1:00.0": "0000:c1:00.0", "1": "", "GPU-cccc": "", "-1": "", "MIG-aaaa": "",
	} {
		g, ok := matchGPU(gpus, id)
		if ok != (want != "") || g.PCIAddress != want {
			t.Errorf("matchGPU(%q) = %q, %v; want %q", id, g.PCIAddress, ok, want)
		}
	}
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestFindGPUAlignedPool(t *testing.T) {
	root := t.TempDir()
	if _, ok, err := findGPUAlignedPool(filepath.Join(root, "missing"), "r/a", discard); ok || err != nil {
		t.Errorf("no alloc dir: ok=%v err=%v, want neither", ok, err)
	}
	write := func(pf allocdir.PoolFile) {
		b, _ := pf.Marshal()
		if err := allocdir.WritePoolFile(root, pf.Pool, b); err != nil {
			t.Fatal(err)
		}
	}
	write(allocdir.PoolFile{Pool: "a", Resource: "r/a", Binding: allocdir.BindingGPUAligned, Members: []string{"mlx5_0"}})
	write(allocdir.PoolFile{Pool: "b", Resource: "r/b", Binding: ""})
	if err := os.MkdirAll(filepath.Join(root, "no-pool-file"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	pf, ok, err := findGPUAlignedPool(root, "r/a", discard)
	if !ok || err != nil || pf.Pool != "a" {
		t.Errorf("r/a: %+v ok=%v err=%v", pf, ok, err)
	}
	for _, r := range []string{"r/b", "r/c"} {
		if _, ok, err := findGPUAlignedPool(root, r, discard); ok || err != nil {
			t.Errorf("%s: ok=%v err=%v, want not a gpuAligned pool", r, ok, err)
		}
	}
	// A pool file that cannot be read (a newer version) may be the pool
	// wanted: an error, unless another matched.
	if err := os.MkdirAll(filepath.Join(root, "newer"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "newer", allocdir.PoolFileName), []byte(`{"version":99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := findGPUAlignedPool(root, "r/c", discard); !errors.Is(err, contractver.ErrNewer) {
		t.Errorf("unreadable pool file and no match: %v, want contractver.ErrNewer", err)
	}
	if pf, ok, err := findGPUAlignedPool(root, "r/a", discard); !ok || err != nil || pf.Pool != "a" {
		t.Errorf("r/a beside an unreadable pool file: %+v ok=%v err=%v", pf, ok, err)
	}
	if err := os.RemoveAll(filepath.Join(root, "newer")); err != nil {
		t.Fatal(err)
	}
	// A torn one costs its own pool only: moved aside and logged once; the
	// pods of other pools go on, its own are refused with a try again.
	if err := os.MkdirAll(filepath.Join(root, "torn"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "torn", allocdir.PoolFileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	if _, ok, err := findGPUAlignedPool(root, "r/c", log); ok || err != nil {
		t.Errorf("another resource beside a torn pool file: ok=%v err=%v, want not a gpuAligned pool", ok, err)
	}
	if n := strings.Count(logged.String(), "pool file does not decode"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logged.String())
	}
	if moved, _ := filepath.Glob(filepath.Join(root, allocdir.QuarantineDir, "torn.pool.json.*")); len(moved) != 1 {
		t.Errorf("quarantine holds %q, want the torn pool file", moved)
	}
	if err := os.WriteFile(filepath.Join(root, "torn", allocdir.PoolFileName), []byte(`{"version":2,"pool":"to`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = findGPUAlignedPool(root, "r/torn", log)
	if !errors.Is(err, ErrRecordDamaged) || Error(err).Code != types.ErrTryAgainLater || !strings.Contains(err.Error(), "moved aside") {
		t.Errorf("the torn pool's own resource: %v, want ErrRecordDamaged (try again later) saying where the file went", err)
	}
	if pf, ok, err := findGPUAlignedPool(root, "r/a", log); !ok || err != nil || pf.Pool != "a" {
		t.Errorf("r/a after the torn pool file was moved: %+v ok=%v err=%v", pf, ok, err)
	}
	if n := strings.Count(logged.String(), "pool file does not decode"); n != 2 {
		t.Errorf("logged %d times, want once per torn file (2):\n%s", n, logged.String())
	}
}

// TestAllocFilesNCCL: a gpuAligned pool that is NCCL's writes NCCL's
// variables into nccl.conf and the env file; one with nccl: false names its
// NICs in KUBE_RDMA_<POOL>_* only, so a container with both pools' env files
// sourced still has one NCCL_IB_HCA, the NCCL pool's.
func TestAllocFilesNCCL(t *testing.T) {
	roce := discovery.RDMADevice{Name: "mlx5_3", Ports: []discovery.Port{{Port: 1, LinkLayer: "Ethernet", RoCEv2GIDIndexes: []int{3}}}}
	rec := &attachment.Attachment{Devices: []attachment.Device{{RDMA: "mlx5_3", PodIfName: "net1"}}}
	tests := []struct {
		name          string
		noNCCL        bool
		nccl, envFile string
	}{
		{"nccl pool", false, "NCCL_IB_HCA==mlx5_3\nNCCL_IB_GID_INDEX=3\n",
			"export NCCL_IB_HCA='=mlx5_3'\nexport NCCL_IB_GID_INDEX=3\nexport UCX_IB_GID_INDEX=3\nexport UCX_NET_DEVICES='mlx5_3:1'\nexport KUBE_RDMA_STORAGE_RDMA_DEVICES='mlx5_3'\nexport KUBE_RDMA_STORAGE_NETDEVS='net1'\n"},
		{"nccl: false", true, "",
			"export KUBE_RDMA_STORAGE_RDMA_DEVICES='mlx5_3'\nexport KUBE_RDMA_STORAGE_NETDEVS='net1'\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &gpuRequest{pool: allocdir.PoolFile{Pool: "storage", NoNCCL: tt.noNCCL}, chosen: map[string]discovery.RDMADevice{"mlx5_3": roce}}
			files, err := r.allocFiles(rec)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.nccl, string(files[allocdir.NCCLConfName])); diff != "" {
				t.Errorf("nccl.conf (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.envFile, string(files[allocdir.EnvFileName])); diff != "" {
				t.Errorf("env (-want +got)\n%s", diff)
			}
		})
	}
}
