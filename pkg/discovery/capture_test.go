package discovery_test

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestCaptureRoundTrip runs hack/capture-sysfs.sh on fixture nodes and checks
// that discovery sees the same node in the extracted tarball: the script
// copies every file discovery reads.
func TestCaptureRoundTrip(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not installed")
	}
	script, err := filepath.Abs("../../hack/capture-sysfs.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dgx", "roce", "soft-roce", "port-down", "azure"} {
		t.Run(name, func(t *testing.T) {
			topo, _ := nodesim.Named(name)
			tree, err := nodesim.Build(filepath.Join(t.TempDir(), "node"), topo)
			if err != nil {
				t.Fatal(err)
			}
			tarball := filepath.Join(t.TempDir(), "capture.tar.gz")
			cmd := exec.Command("bash", script, "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot, "-o", tarball)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("capture-sysfs.sh: %v\n%s", err, out)
			}
			dir := t.TempDir()
			if out, err := exec.Command("tar", "-C", dir, "-xzf", tarball).CombinedOutput(); err != nil {
				t.Fatalf("tar: %v\n%s", err, out)
			}
			want, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
			if err != nil {
				t.Fatal(err)
			}
			got, err := discovery.Scanner{SysRoot: filepath.Join(dir, "sys"), ProcRoot: filepath.Join(dir, "proc")}.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("discovery on the capture differs (-original +capture):\n%s", diff)
			}
			if _, err := os.Stat(filepath.Join(dir, "capture-info.txt")); err != nil {
				t.Errorf("capture has no capture-info.txt: %v", err)
			}
		})
	}
}

// TestScanNaiveCopies: users attach trees copied without our capture script.
// tar pads every sysfs attribute with NULs to its stat size (4096); cp -r
// leaves an empty file where the kernel failed a read (an empty GID slot);
// procfs files have size 0, so the NVIDIA information files come out empty.
// Discovery must see the same node, less the GPU UUIDs it cannot know.
func TestScanNaiveCopies(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	want, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	for i := range want.GPUs {
		want.GPUs[i].UUID, want.GPUs[i].Minor = "", nil
	}
	pad := func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if len(b) > 4096 {
			return nil
		}
		return os.WriteFile(path, append(b, make([]byte, 4096-len(b))...), 0o644)
	}
	if err := filepath.WalkDir(tree.SysRoot, pad); err != nil {
		t.Fatal(err)
	}
	ports, _ := filepath.Glob(filepath.Join(tree.SysRoot, "class/infiniband/*/ports/*"))
	for _, p := range ports {
		for _, sub := range []string{"gids", "gid_attrs/types", "gid_attrs/ndevs"} {
			for i := 100; i < 104; i++ {
				if err := os.WriteFile(filepath.Join(p, sub, fmt.Sprint(i)), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	infos, _ := filepath.Glob(filepath.Join(tree.ProcRoot, "driver/nvidia/gpus/*/information"))
	if len(infos) == 0 {
		t.Fatal("fixture has no NVIDIA information files")
	}
	for _, f := range infos {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("discovery on the copied tree differs (-original +copy):\n%s", diff)
	}
}
