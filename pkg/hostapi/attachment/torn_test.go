package attachment

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// TestTornRecordsMovedAside: a record that does not decode, among good
// ones, costs only itself: List lists the others, the torn one is in
// quarantine/ with its bytes, reported once; a Load of it is "no record";
// a record of a newer version is refused, not moved.
func TestTornRecordsMovedAside(t *testing.T) {
	dir := t.TempDir()
	var damaged []Damaged
	s := Store{Dir: dir, BootID: "boot", Damaged: func(d Damaged) { damaged = append(damaged, d) }}
	good := []Attachment{
		{Key: Key{"c1", "net1"}, Devices: []Device{{RDMA: "mlx5_0"}}, Complete: true},
		{Key: Key{"c3", "net1"}, Devices: []Device{{RDMA: "mlx5_2"}}, Complete: true},
	}
	for _, a := range good {
		if err := s.Save(a); err != nil {
			t.Fatal(err)
		}
	}
	torn := map[string]string{
		"c2_net1.json": `{"schema":1,"bootID":"boot","containerID":"c2","dev`, // a crash mid-write
		"c4_net1.json": "",                                                    // truncated
		"c5_net1.json": "\x00\x00\x00\x00",                                    // garbage
		"c6_net1.json": `{"schema":"one"}`,                                    // a version that is no number
	}
	for name, data := range torn {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	claims, prev, err := s.Claimed()
	if err != nil || len(prev) != 0 {
		t.Fatalf("Claimed = %v, %v, %v; want the good records' claims", claims, prev, err)
	}
	if diff := cmp.Diff(map[string]Key{"mlx5_0": {"c1", "net1"}, "mlx5_2": {"c3", "net1"}}, claims); diff != "" {
		t.Errorf("claims (-want +got):\n%s", diff)
	}
	if len(damaged) != len(torn) {
		t.Fatalf("reported %d damaged records, want %d: %+v", len(damaged), len(torn), damaged)
	}
	for _, d := range damaged {
		name := filepath.Base(d.Path)
		if d.Err == nil || filepath.Dir(d.Moved) != filepath.Join(dir, QuarantineDir) {
			t.Errorf("%s: %+v, want moved to %s with its cause", name, d, QuarantineDir)
			continue
		}
		if data, err := os.ReadFile(d.Moved); err != nil || string(data) != torn[name] {
			t.Errorf("%s: quarantined as %q, %v; want %q", d.Moved, data, err, torn[name])
		}
		if _, err := os.Stat(d.Path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still in place: %v", d.Path, err)
		}
	}
	// Reported once: the next listing sees the good records only.
	damaged = nil
	if cur, _, err := s.List(); err != nil || len(cur) != len(good) || len(damaged) != 0 {
		t.Errorf("second List = %d records, %v, %d damaged; want %d, nil, 0", len(cur), err, len(damaged), len(good))
	}
	if n, err := quarantine.Count(filepath.Join(dir, QuarantineDir)); n != len(torn) || err != nil {
		t.Errorf("quarantine holds %d files, %v; want %d", n, err, len(torn))
	}

	// A Load of a torn record (an ADD or DEL of its pod) is no record.
	if err := os.WriteFile(filepath.Join(dir, "c7_eth0.json"), []byte(`{"schema":1,`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = s.Load(Key{"c7", "eth0"})
	if !errors.Is(err, ErrNotFound) || !errors.Is(err, quarantine.ErrDamaged) || errors.Is(err, ErrStale) {
		t.Errorf("Load of a torn record = %v, want ErrNotFound and quarantine.ErrDamaged", err)
	}
	if len(damaged) != 1 || damaged[0].Moved == "" {
		t.Errorf("Load reported %+v, want the record moved aside", damaged)
	}
	if _, err := s.Load(Key{"c7", "eth0"}); !errors.Is(err, ErrNotFound) || errors.Is(err, quarantine.ErrDamaged) || len(damaged) != 1 {
		t.Errorf("second Load = %v (%d reported), want plain ErrNotFound, nothing reported again", err, len(damaged))
	}
	// LoadPrevious of a torn record too.
	if err := os.WriteFile(filepath.Join(dir, "c8_eth0.json"), []byte(`nope`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadPrevious(Key{"c8", "eth0"}); !errors.Is(err, ErrNotFound) || !errors.Is(err, quarantine.ErrDamaged) || len(damaged) != 2 {
		t.Errorf("LoadPrevious of a torn record = %v (%d reported), want ErrNotFound, moved aside", err, len(damaged))
	}

	// A record of a newer version is refused by name and stays in place.
	newer := filepath.Join(dir, "c9_eth0.json")
	if err := os.WriteFile(newer, []byte(`{"schema":3,"containerID":"c9","ifName":"eth0","devices":{"changed":true}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cur, _, err := s.List()
	if !errors.Is(err, contractver.ErrNewer) || len(cur) != len(good) || len(damaged) != 2 {
		t.Errorf("List beside a newer record = %d records, %v, %d reported; want the good ones and ErrNewer, nothing moved", len(cur), err, len(damaged))
	}
	if _, err := os.Stat(newer); err != nil {
		t.Errorf("the newer record was moved: %v", err)
	}
}

// TestTornRecordsReadOnly: the readers outside the plugin (the daemon's node
// state, the installer) read without moving anything, skip a torn record
// and do not fail for it; HasRecords does not count it.
func TestTornRecordsReadOnly(t *testing.T) {
	dir := t.TempDir()
	s := Store{Dir: dir, BootID: "boot", Damaged: func(d Damaged) { t.Errorf("read-only reader reported %+v", d) }}
	if err := os.WriteFile(filepath.Join(dir, "c2_net1.json"), []byte(`{"schema":1,"dev`), 0o600); err != nil {
		t.Fatal(err)
	}
	if has, err := s.HasRecords(); has || err != nil {
		t.Errorf("HasRecords with a torn record alone = %v, %v; want false", has, err)
	}
	if err := s.Save(Attachment{Key: Key{"c1", "net1"}}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil || len(recs) != 1 || recs[0].Key != (Key{"c1", "net1"}) {
		t.Errorf("Records = %+v, %v; want c1/net1 alone", recs, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c2_net1.json")); err != nil {
		t.Errorf("a read-only reader moved the torn record: %v", err)
	}
}
