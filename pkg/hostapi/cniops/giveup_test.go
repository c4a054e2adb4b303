package cniops

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

var goldenGiveUps = []GiveUp{
	{Time: time.Date(2026, 11, 29, 21, 0, 0, 0, time.UTC), Command: "DEL", ContainerID: "c0ffee", IfName: "net1",
		PodNamespace: "ml", PodName: "trainer-0", PodUID: "6f1c2d3e-0000-4000-8000-000000000001",
		RDMA: "mlx5_3", Netdev: "ens1f0v2", PodIfName: "net1", Function: "0000:3b:00.3", Reason: GiveUpNotBack, Waited: 90 * time.Second},
	{Time: time.Date(2026, 11, 29, 21, 0, 5, 0, time.UTC), Command: "GC", ContainerID: "deadbeef", IfName: "net2",
		RDMA: "mlx5_9", Netdev: "enp59s0f0s2", Function: "mlx5_core.sf.2", Reason: GiveUpGone},
}

func drainGiveUps(t *testing.T, dir string) ([]GiveUp, Stats) {
	t.Helper()
	return drainTwice(t, dir, DrainGiveUps)
}

// TestGiveUpGoldenV1: testdata/gaveup-v1.jsonl (version 1, the first; its
// second line has a field a newer plugin might add) reads as written, and
// what AppendGiveUp writes reads back the same.
func TestGiveUpGoldenV1(t *testing.T) {
	b, err := os.ReadFile("testdata/gaveup-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, GiveUpFileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, st := drainGiveUps(t, dir)
	if diff := cmp.Diff(goldenGiveUps, got); diff != "" {
		t.Errorf("DrainGiveUps (-want +got)\n%s", diff)
	}
	if st != (Stats{}) {
		t.Errorf("stats %+v, want none", st)
	}
	for _, g := range goldenGiveUps {
		if err := AppendGiveUp(dir, g); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ = drainGiveUps(t, dir); !cmp.Equal(goldenGiveUps, got) {
		t.Errorf("appended and drained: %+v", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the spool holds %d files after two drains, want none", len(ents))
	}
}

// TestGiveUpBadLines: a torn line, garbage, an invalid give-up and a newer
// version are counted, not handed on; the operations spool beside it is
// not touched by DrainGiveUps, nor the give-ups by Drain.
func TestGiveUpBadLines(t *testing.T) {
	dir := t.TempDir()
	data := strings.Join([]string{
		`garbage`,
		`{"v":1,"cmd":"ADD","rdma":"mlx5_0","reason":"not-back"}`,
		`{"v":1,"cmd":"DEL","rdma":"","reason":"not-back"}`,
		`{"v":1,"cmd":"DEL","rdma":"mlx5_0","reason":"bored"}`,
		`{"v":2,"cmd":"DEL","rdma":"mlx5_0","reason":"not-back"}`,
		`{"v":1,"cmd":"DEL","rdma":"mlx5_1","reason":"function-gone"}`,
		`{"v":1,"cmd":"DEL","rdma":"mlx5_2"`,
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, GiveUpFileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Append(dir, golden[0]); err != nil {
		t.Fatal(err)
	}
	got, st := drainGiveUps(t, dir)
	if len(got) != 1 || got[0].RDMA != "mlx5_1" {
		t.Errorf("handed on %+v, want mlx5_1's only", got)
	}
	if st.Malformed != 5 || st.Newer != 1 || !errors.Is(st.NewerErr, contractver.ErrNewer) {
		t.Errorf("stats %+v, want 5 malformed and 1 newer", st)
	}
	ops, _ := drainAll(t, dir)
	if len(ops) != 1 {
		t.Errorf("the operations spool beside it: %d records, want 1", len(ops))
	}
	long := GiveUp{Command: "DEL", RDMA: strings.Repeat("x", MaxGiveUpLine), Reason: GiveUpGone}
	if err := AppendGiveUp(dir, long); !errors.Is(err, ErrInvalid) {
		t.Errorf("a line over MaxGiveUpLine: %v, want ErrInvalid", err)
	}
}
