package agent

import (
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// stepLent answers LentDevices with lent, or err.
type stepLent struct {
	lent map[string]bool
	err  error
}

func (s *stepLent) LentDevices() (map[string]bool, error) { return s.lent, s.err }

// TestLentKeeper: each step hands the keeper a snapshot at a time, with
// the records' answer then; the devices handed on, their health, and
// whether the kept set changed.
func TestLentKeeper(t *testing.T) {
	mlx := func(name, gid string) discovery.RDMADevice {
		return discovery.RDMADevice{Name: name, PCIAddress: "0000:" + name, Ports: []discovery.Port{{Port: 1, GIDs: []discovery.GID{{GID: gid}}}}}
	}
	a, b := mlx("mlx5_0", "fe80::a"), mlx("mlx5_1", "fe80::b")
	type step struct {
		at      time.Duration
		devs    []discovery.RDMADevice
		lent    map[string]bool
		err     error
		want    []discovery.RDMADevice
		healthy map[string]bool
		changed bool
	}
	grace := time.Second
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"present: handed on as is", []step{
			{devs: []discovery.RDMADevice{a, b}, want: []discovery.RDMADevice{a, b}, healthy: map[string]bool{"mlx5_0": true, "mlx5_1": true}},
		}},
		{"lent: kept as last seen, healthy, until the record goes", []step{
			{devs: []discovery.RDMADevice{a, b}, want: []discovery.RDMADevice{a, b}, healthy: map[string]bool{"mlx5_0": true, "mlx5_1": true}},
			{at: 10 * time.Millisecond, devs: []discovery.RDMADevice{b}, lent: map[string]bool{"mlx5_0": true},
				want: []discovery.RDMADevice{a, b}, healthy: map[string]bool{"mlx5_0": true, "mlx5_1": true}, changed: true},
			{at: 5 * time.Second, devs: []discovery.RDMADevice{b}, lent: map[string]bool{"mlx5_0": true},
				want: []discovery.RDMADevice{a, b}, healthy: map[string]bool{"mlx5_0": true, "mlx5_1": true}},
			{at: 6 * time.Second, devs: []discovery.RDMADevice{b}, lent: map[string]bool{},
				want: []discovery.RDMADevice{b}, healthy: map[string]bool{"mlx5_1": true}, changed: true},
		}},
		{"lent then back: the snapshot's again", []step{
			{devs: []discovery.RDMADevice{a}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
			{at: time.Millisecond, devs: nil, lent: map[string]bool{"mlx5_0": true},
				want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}, changed: true},
			{at: 2 * time.Millisecond, devs: []discovery.RDMADevice{mlx("mlx5_0", "fe80::c")}, lent: map[string]bool{"mlx5_0": true},
				want: []discovery.RDMADevice{mlx("mlx5_0", "fe80::c")}, healthy: map[string]bool{"mlx5_0": true}, changed: true},
		}},
		{"not lent: unhealthy for the grace, then dropped", []step{
			{devs: []discovery.RDMADevice{a}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
			{at: 10 * time.Millisecond, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": false}, changed: true},
			{at: 10*time.Millisecond + grace - 1, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": false}},
			{at: 10*time.Millisecond + grace, want: nil, healthy: nil, changed: true},
		}},
		{"a record read in the grace keeps it", []step{
			{devs: []discovery.RDMADevice{a}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
			{at: 10 * time.Millisecond, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": false}, changed: true},
			{at: 500 * time.Millisecond, lent: map[string]bool{"mlx5_0": true}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
			{at: 5 * time.Second, lent: map[string]bool{"mlx5_0": true}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
		}},
		{"an error keeps the last answer", []step{
			{devs: []discovery.RDMADevice{a}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
			{at: time.Millisecond, lent: map[string]bool{"mlx5_0": true}, want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}, changed: true},
			{at: 5 * time.Second, err: errors.New("state dir unreadable"), want: []discovery.RDMADevice{a}, healthy: map[string]bool{"mlx5_0": true}},
		}},
	} {
		src := &stepLent{}
		k := newLentKeeper(src, grace, slog.New(slog.DiscardHandler), "")
		t0 := time.Now()
		for i, s := range c.steps {
			src.lent, src.err = s.lent, s.err
			healthy := map[string]bool{}
			for _, d := range s.devs {
				healthy[d.Name] = true
			}
			in := &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: s.devs}, Healthy: healthy}
			before := &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: slices.Clone(s.devs)}, Healthy: maps.Clone(healthy)}
			out, changed := k.apply(in, t0.Add(s.at))
			if diff := cmp.Diff(s.want, out.Node.RDMADevices); diff != "" {
				t.Errorf("%s, step %d: devices (-want +got):\n%s", c.name, i, diff)
			}
			if s.healthy == nil {
				s.healthy = map[string]bool{}
			}
			if diff := cmp.Diff(s.healthy, out.Healthy); diff != "" {
				t.Errorf("%s, step %d: health (-want +got):\n%s", c.name, i, diff)
			}
			if changed != s.changed {
				t.Errorf("%s, step %d: changed %v, want %v", c.name, i, changed, s.changed)
			}
			if diff := cmp.Diff(before, in); diff != "" {
				t.Errorf("%s, step %d: the watcher's snapshot was modified (-before +after):\n%s", c.name, i, diff)
			}
		}
	}
}

// TestLentFileEdges: a lent-devices file that does not decode, or of
// another version, is ignored (its devices are not listed) and replaced
// by the next write; withdraw removes the file and nothing writes it
// again.
func TestLentFileEdges(t *testing.T) {
	a := discovery.RDMADevice{Name: "mlx5_0", PCIAddress: "0000:18:00.0"}
	lentA := &stepLent{lent: map[string]bool{"mlx5_0": true}}
	empty := &nodewatch.Snapshot{Node: &discovery.Node{}}
	for _, bad := range []string{`{"version": 1, "devices": [`, `{"version": 2, "devices": [{"name": "mlx5_0"}]}`} {
		file := filepath.Join(t.TempDir(), "_lent-devices.json")
		if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		k := newLentKeeper(lentA, time.Second, slog.New(slog.DiscardHandler), file)
		if out, _ := k.apply(empty, time.Now()); len(out.Node.RDMADevices) != 0 {
			t.Errorf("%q: devices %v from a file that does not decode", bad, out.Node.RDMADevices)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Errorf("%q: file not replaced (nothing lent: removed): %v", bad, err)
		}
	}

	file := filepath.Join(t.TempDir(), "_lent-devices.json")
	k := newLentKeeper(lentA, time.Second, slog.New(slog.DiscardHandler), file)
	k.apply(&nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{a}}}, time.Now())
	k.apply(empty, time.Now())
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), `"mlx5_0"`) {
		t.Fatalf("lent mlx5_0 not written: %q, %v", b, err)
	}
	// Another keeper from it (a restart) keeps mlx5_0.
	k2 := newLentKeeper(lentA, time.Second, slog.New(slog.DiscardHandler), file)
	if out, _ := k2.apply(empty, time.Now()); len(out.Node.RDMADevices) != 1 || !out.Healthy["mlx5_0"] {
		t.Errorf("restarted keeper: %v %v, want mlx5_0 healthy", out.Node.RDMADevices, out.Healthy)
	}
	k2.withdraw()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("withdraw left the file: %v", err)
	}
	lentA.lent = map[string]bool{"mlx5_0": true, "mlx5_1": true} // a change that would be written
	k2.apply(&nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{{Name: "mlx5_1"}}}}, time.Now())
	k2.apply(empty, time.Now())
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("written after withdraw: %v", err)
	}
}
