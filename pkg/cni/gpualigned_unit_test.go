package cni

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestMirrorsDevicePlugin: the copies in allocfiles.go give the device
// plugin's answers (the CNI binary does not link the daemon's packages;
// this test does).
func TestMirrorsDevicePlugin(t *testing.T) {
	for _, pool := range []string{"gpu-nics", "GPU.nics_2", "a-b-c", "x"} {
		if got, want := envName(pool), config.EnvName(pool); got != want {
			t.Errorf("envName(%q) = %q, device plugin says %q", pool, got, want)
		}
	}
	ports := 0
	for _, name := range nodesim.Names() {
		topo, _ := nodesim.Named(name)
		tree, err := nodesim.Build(t.TempDir(), topo)
		if err != nil {
			t.Fatal(err)
		}
		n, err := discovery.Scanner{SysRoot: tree.SysRoot}.Scan()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range n.RDMADevices {
			for _, p := range d.Ports {
				gi, gok := roceV2GIDIndex(p)
				wi, wok := containeredits.RoCEv2GIDIndex(p)
				if gi != wi || gok != wok {
					t.Errorf("%s %s port %d: roceV2GIDIndex = %d, %v; device plugin %d, %v", name, d.Name, p.Port, gi, gok, wi, wok)
				}
				ports++
			}
		}
	}
	if ports == 0 {
		t.Fatal("no ports compared")
	}
}

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

func TestFindGPUAlignedPool(t *testing.T) {
	root := t.TempDir()
	if _, ok, err := findGPUAlignedPool(filepath.Join(root, "missing"), "r/a"); ok || err != nil {
		t.Errorf("no alloc dir: ok=%v err=%v, want neither", ok, err)
	}
	write := func(pf allocdir.PoolFile) {
		b, _ := pf.Marshal()
		os.MkdirAll(allocdir.PoolDir(root, pf.Pool), 0o755)
		if err := os.WriteFile(allocdir.PoolFilePath(root, pf.Pool), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(allocdir.PoolFile{Pool: "a", Resource: "r/a", Binding: allocdir.BindingGPUAligned, Members: []string{"mlx5_0"}})
	write(allocdir.PoolFile{Pool: "b", Resource: "r/b", Binding: ""})
	os.MkdirAll(filepath.Join(root, "no-pool-file"), 0o755)
	os.WriteFile(filepath.Join(root, "stray"), nil, 0o644)
	pf, ok, err := findGPUAlignedPool(root, "r/a")
	if !ok || err != nil || pf.Pool != "a" {
		t.Errorf("r/a: %+v ok=%v err=%v", pf, ok, err)
	}
	for _, r := range []string{"r/b", "r/c"} {
		if _, ok, err := findGPUAlignedPool(root, r); ok || err != nil {
			t.Errorf("%s: ok=%v err=%v, want not a gpuAligned pool", r, ok, err)
		}
	}
	// A pool file that cannot be read may be the pool wanted: an error,
	// unless another matched.
	os.MkdirAll(filepath.Join(root, "torn"), 0o755)
	os.WriteFile(filepath.Join(root, "torn", allocdir.PoolFileName), []byte("{"), 0o644)
	if _, _, err := findGPUAlignedPool(root, "r/c"); err == nil {
		t.Error("unreadable pool file and no match: no error")
	}
	if pf, ok, err := findGPUAlignedPool(root, "r/a"); !ok || err != nil || pf.Pool != "a" {
		t.Errorf("r/a beside an unreadable pool file: %+v ok=%v err=%v", pf, ok, err)
	}
}
