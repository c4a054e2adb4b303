package discovery_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestScanBadRoots(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tree, err := nodesim.Build(filepath.Join(dir, "node"), nodesim.PortDown())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, sys, proc, wantInErr string
	}{
		{"missing sysfs root", filepath.Join(dir, "nope"), "", filepath.Join(dir, "nope")},
		{"sysfs root is a file", file, "", file},
		{"sysfs root without devices/", dir, "", dir},
		{"empty sysfs root flag", "", "", "sysfs root is not set"},
		{"missing procfs root", tree.SysRoot, filepath.Join(dir, "noproc"), filepath.Join(dir, "noproc")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, err := discovery.Scanner{SysRoot: tt.sys, ProcRoot: tt.proc}.Scan()
			if err == nil {
				t.Fatalf("Scan succeeded with %d devices, want an error", len(n.RDMADevices))
			}
			if !strings.Contains(err.Error(), tt.wantInErr) {
				t.Errorf("error %q does not name %q", err, tt.wantInErr)
			}
		})
	}
}

// TestScanBadDevices damages one device of a good tree in each case: the
// device is skipped with a warning that names the file, the rest is intact.
func TestScanBadDevices(t *testing.T) {
	pciDir := func(t *testing.T, tree nodesim.Tree, addr string) string {
		p, err := filepath.EvalSymlinks(filepath.Join(tree.SysRoot, "bus/pci/devices", addr))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(t *testing.T, path, content string) {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const nic1, gpu1 = "0000:3a:00.0", "0000:3b:00.0" // mlx5_1 and GPU1 of PortDown
	tests := []struct {
		name       string
		damage     func(t *testing.T, tree nodesim.Tree)
		wantWarn   string // substring of the one warning
		wantDevs   int
		wantGPUs   int
		skipsGPU   bool
		wantInWarn string
	}{
		{"dangling class link", func(t *testing.T, tree nodesim.Tree) {
			if err := os.RemoveAll(filepath.Join(pciDir(t, tree, nic1), "infiniband")); err != nil {
				t.Fatal(err)
			}
		}, "skip rdma device mlx5_1: dangling link", 1, 2, false, "class/infiniband/mlx5_1"},
		{"garbage vendor", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(pciDir(t, tree, nic1), "vendor"), "mellanox\n")
		},
			"skip rdma device mlx5_1", 1, 2, false, "vendor"},
		{"garbage port state", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1/ports/1/state"), "up\n")
		}, "skip rdma device mlx5_1", 1, 2, false, "ports/1/state"},
		{"garbage link layer", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1/ports/1/link_layer"), "Token Ring\n")
		}, "skip rdma device mlx5_1", 1, 2, false, "link_layer"},
		{"garbage numa node", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(pciDir(t, tree, nic1), "numa_node"), "zero\n")
		},
			"skip rdma device mlx5_1", 1, 2, false, "numa_node"},
		{"garbage node guid", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1/node_guid"), "0xdeadbeef\n")
		}, "skip rdma device mlx5_1", 1, 2, false, "node_guid"},
		{"unreadable port state (a directory)", func(t *testing.T, tree nodesim.Tree) {
			p := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1/ports/1/state")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "skip rdma device mlx5_1", 1, 2, false, "ports/1/state"},
		{"garbage gpu class", func(t *testing.T, tree nodesim.Tree) { write(t, filepath.Join(pciDir(t, tree, gpu1), "class"), "3d\n") },
			"skip pci device " + gpu1, 2, 1, true, "class"},
		{"garbage nvidia information", func(t *testing.T, tree nodesim.Tree) {
			write(t, filepath.Join(tree.ProcRoot, "driver/nvidia/gpus", gpu1, "information"), "GPU UUID: what\n")
		}, "skip pci device " + gpu1, 2, 1, true, "information"},
		{"gpu with no nvidia procfs entry keeps no uuid", func(t *testing.T, tree nodesim.Tree) {
			if err := os.RemoveAll(filepath.Join(tree.ProcRoot, "driver/nvidia/gpus", gpu1)); err != nil {
				t.Fatal(err)
			}
		}, "", 2, 2, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree, err := nodesim.Build(t.TempDir(), nodesim.PortDown())
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, tree)
			n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
			if err != nil {
				t.Fatalf("Scan: %v", err)
			}
			if len(n.RDMADevices) != tt.wantDevs || len(n.GPUs) != tt.wantGPUs {
				t.Errorf("got %d rdma devices and %d GPUs, want %d and %d", len(n.RDMADevices), len(n.GPUs), tt.wantDevs, tt.wantGPUs)
			}
			if tt.wantWarn == "" {
				if len(n.Warnings) != 0 {
					t.Errorf("warnings %q, want none", n.Warnings)
				}
				return
			}
			// A bad vendor file is reported by both the RDMA and the GPU scan.
			named := false
			for _, w := range n.Warnings {
				named = named || strings.Contains(w, tt.wantWarn)
				if !strings.Contains(w, tt.wantInWarn) {
					t.Errorf("warning %q does not name %q", w, tt.wantInWarn)
				}
			}
			if !named {
				t.Errorf("warnings = %q, want one containing %q", n.Warnings, tt.wantWarn)
			}
			if len(n.Affinity) != len(n.RDMADevices)*len(n.GPUs) {
				t.Errorf("%d affinity entries for %d devices x %d GPUs", len(n.Affinity), len(n.RDMADevices), len(n.GPUs))
			}
		})
	}
}

// TestScanUnreadableFile: a port attribute the scanner may not read (mode
// 0000) skips its device with a warning naming the file. Root reads such a
// file anyway (CAP_DAC_OVERRIDE), so there the device is intact: the test
// checks whichever applies to the user running it.
func TestScanUnreadableFile(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.PortDown())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1/ports/1/state")
	if err := os.Chmod(p, 0); err != nil {
		t.Fatal(err)
	}
	_, openErr := os.ReadFile(p)
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if openErr == nil { // root
		if len(n.RDMADevices) != 2 || len(n.Warnings) != 0 {
			t.Errorf("as a user who can read mode 0000: %d rdma devices, warnings %q; want 2 and none", len(n.RDMADevices), n.Warnings)
		}
		return
	}
	if len(n.RDMADevices) != 1 || len(n.Warnings) != 1 || !strings.Contains(n.Warnings[0], "skip rdma device mlx5_1") ||
		!strings.Contains(n.Warnings[0], "ports/1/state") || !strings.Contains(n.Warnings[0], "permission denied") {
		t.Errorf("%d rdma devices, warnings %q; want mlx5_1 skipped for permission denied on ports/1/state", len(n.RDMADevices), n.Warnings)
	}
}

// TestScanGIDTableHoles: slots are read past a hole left by a removed
// address, and the scan stops after a long run of empty slots.
func TestScanGIDTableHoles(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.SoftRoCE())
	if err != nil {
		t.Fatal(err)
	}
	port := filepath.Join(tree.SysRoot, "class/infiniband/rxe0/ports/1")
	put := func(i int, gid, typ string) {
		for sub, v := range map[string]string{"gids": gid, "gid_attrs/types": typ, "gid_attrs/ndevs": "enp0s3"} {
			if err := os.WriteFile(filepath.Join(port, sub, itoa(i)), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	const zero = "0000:0000:0000:0000:0000:0000:0000:0000"
	put(4, zero, "RoCE v2") // an old kernel's empty slot
	put(5, "0000:0000:0000:0000:0000:ffff:0a00:0210", "RoCE v2")
	for i := 6; i < 6+8; i++ {
		put(i, zero, "RoCE v2")
	}
	put(14, "0000:0000:0000:0000:0000:ffff:0a00:0211", "RoCE v2") // past the run of 8: not read
	n, err := discovery.Scanner{SysRoot: tree.SysRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	got := n.RDMADevices[0].Ports[0].RoCEv2GIDIndexes
	if want := []int{1, 3, 5}; !equalInts(got, want) {
		t.Errorf("RoCE v2 GID indexes = %v, want %v", got, want)
	}
}
