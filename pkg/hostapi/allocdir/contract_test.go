package allocdir

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// readGolden is testdata/pool-v1.json, a pool file as the daemon wrote it
// before pool files had a version (PoolFile.Marshal).
func readGolden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/pool-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPoolFileGoldenV1: a pool file without a version is version 1 and
// reads as main wrote it; Marshal writes it as version 2, the same keys
// after "version".
func TestPoolFileGoldenV1(t *testing.T) {
	golden := readGolden(t)
	root := t.TempDir()
	if err := WritePoolFile(root, "gpu-nics", golden); err != nil {
		t.Fatal(err)
	}
	got, err := ReadPoolFile(root, "gpu-nics")
	if err != nil {
		t.Fatal(err)
	}
	want := PoolFile{Pool: "gpu-nics", Resource: "rdma.kube-rdma.io/gpu-nics", Binding: BindingGPUAligned,
		Members: []string{"mlx5_0", "mlx5_1", "mlx5_2"}, Healthy: []string{"mlx5_0", "mlx5_2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ReadPoolFile (-want +got)\n%s", diff)
	}
	b, err := got.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("{\n  \"version\": 2,\n"+string(golden[2:]), string(b)); diff != "" {
		t.Errorf("Marshal (-want +got)\n%s", diff)
	}
}

// TestPoolFileNewerRefused: a pool file of version 3 is an error naming
// the file and both versions; a pool file removed is fs.ErrNotExist again.
func TestPoolFileNewerRefused(t *testing.T) {
	root := t.TempDir()
	if err := WritePoolFile(root, "gpu-nics", []byte("{\n  \"version\": 3,\n"+string(readGolden(t)[2:]))); err != nil {
		t.Fatal(err)
	}
	_, err := ReadPoolFile(root, "gpu-nics")
	if !errors.Is(err, contractver.ErrNewer) {
		t.Fatalf("ReadPoolFile of version 3 = %v, want contractver.ErrNewer", err)
	}
	for _, want := range []string{"pool file " + PoolFilePath(root, "gpu-nics"), "version 3 is newer", "reads (2 and 1)", contractver.Remedy} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for range 2 { // twice: a missing file is fine
		if err := RemovePoolFile(root, "gpu-nics"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadPoolFile(root, "gpu-nics"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadPoolFile after RemovePoolFile = %v, want fs.ErrNotExist", err)
	}
	fi, err := os.Stat(PoolDir(root, "gpu-nics"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("pool dir: %v, %v; want mode 0755", fi, err)
	}
}
