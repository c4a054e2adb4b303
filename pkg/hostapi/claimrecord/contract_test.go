package claimrecord

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// goldenUID is the claim of testdata/claim-v1.json, a record as the agent
// wrote it before records had a version (Write).
const goldenUID = "5b1c0e4e-0000-4000-8000-000000000001"

func goldenDir(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(Path(dir, goldenUID), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func readGolden(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/claim-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoldenV1: a record without a version is version 1 and reads as main
// wrote it; writing it back gives version 2: the same keys after
// "version".
func TestGoldenV1(t *testing.T) {
	golden := readGolden(t)
	dir := goldenDir(t, golden)
	got, _, err := ReadAll(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{{UID: goldenUID, Namespace: "team-a", Name: "nics",
		PodUIDs: []string{"0d6b3c1e-0000-4000-8000-0000000000aa"},
		Devices: []Device{
			{Request: "nic", Pool: "node-1/ib", Device: "pci-0000-3b-00-0", RDMA: "mlx5_3", PCIAddress: "0000:3b:00.0"},
			{Request: "sf/any", Pool: "node-1/ib", Device: "aux-mlx5-core-sf-2", RDMA: "mlx5_9", PCIAddress: "0000:3b:00.0", AuxDevice: "mlx5_core.sf.2"},
			{Request: "monitor", Pool: "node-1/ib", Device: "pci-0000-3b-00-0", AdminAccess: true, RDMA: "mlx5_3", PCIAddress: "0000:3b:00.0"},
		}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ReadAll (-want +got)\n%s", diff)
	}
	if err := Write(dir, got[0]); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(Path(dir, goldenUID))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"version":2,`+string(golden[1:]), string(again)); diff != "" {
		t.Errorf("rewritten record (-want +got)\n%s", diff)
	}
}

// TestNewerRefused: a record of version 3 is an error naming the file and
// both versions.
func TestNewerRefused(t *testing.T) {
	dir := goldenDir(t, []byte(`{"version":3,`+string(readGolden(t)[1:])))
	_, _, err := ReadAll(dir)
	if !errors.Is(err, contractver.ErrNewer) {
		t.Fatalf("ReadAll of version 3 = %v, want contractver.ErrNewer", err)
	}
	for _, want := range []string{"claim record " + filepath.Join(dir, goldenUID+".json"), "version 3 is newer", "reads (2 and 1)", contractver.Remedy} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
