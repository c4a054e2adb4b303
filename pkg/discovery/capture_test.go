package discovery_test

import (
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
	for _, name := range []string{"dgx", "roce", "soft-roce", "port-down"} {
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
