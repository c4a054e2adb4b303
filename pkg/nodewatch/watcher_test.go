package nodewatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestSnapshots: health changes publish a new Gen, port changes a new
// DevicesGen, nothing changed publishes nothing, a published snapshot
// never changes, and HealthSince moves only for a device whose health did.
func TestSnapshots(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}})
	t0 := time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return t0 }
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	defer w.states.Close()
	first, changed := w.Latest()
	if !first.Healthy["mlx5_9"] || first.Node.Affinity != nil {
		t.Fatalf("first snapshot: mlx5_9 healthy %v, affinity %d entries", first.Healthy["mlx5_9"], len(first.Node.Affinity))
	}

	w.refresh(time.Now(), gidRequest{})
	if s, _ := w.Latest(); s != first {
		t.Fatal("an unchanged node published a snapshot")
	}

	if err := tree.SetPortState("mlx5_9", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	t2 := t0.Add(1500 * time.Millisecond)
	w.refresh(t2, gidRequest{})
	down, _ := w.Latest()
	select {
	case <-changed:
	default:
		t.Fatal("change channel not closed")
	}
	if down.Gen != first.Gen+1 || down.DevicesGen != first.DevicesGen || down.Healthy["mlx5_9"] {
		t.Errorf("after port down: gen %d devicesGen %d healthy %v; want %d, %d, false",
			down.Gen, down.DevicesGen, down.Healthy["mlx5_9"], first.Gen+1, first.DevicesGen)
	}
	if !first.Healthy["mlx5_9"] {
		t.Error("the first snapshot changed")
	}

	port := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_9/ports/1")
	for file, v := range map[string]string{"gids/3": "0000:0000:0000:0000:0000:ffff:0a01:0909", "gid_attrs/types/3": "RoCE v2", "gid_attrs/ndevs/3": "gpu0rdma0v1"} {
		if err := os.WriteFile(filepath.Join(port, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w.refresh(t2.Add(time.Second), gidRequest{all: true})
	gids, _ := w.Latest()
	other := first.Node.RDMADevices[0].Name
	if other == "mlx5_9" {
		other = first.Node.RDMADevices[1].Name
	}
	for _, c := range []struct {
		what string
		s    *Snapshot
		dev  string
		want time.Time
	}{
		{"first scan", first, "mlx5_9", t0}, {"port down", down, "mlx5_9", t2}, {"port down", down, other, t0},
		{"GIDs changed, health not", gids, "mlx5_9", t2}, {"GIDs changed, health not", gids, other, t0},
	} {
		if got := c.s.HealthSince[c.dev]; !got.Equal(c.want) {
			t.Errorf("%s: %s's HealthSince %s, want %s", c.what, c.dev, got.Format(time.StampMilli), c.want.Format(time.StampMilli))
		}
	}
	if gids.DevicesGen != down.DevicesGen+1 {
		t.Errorf("devicesGen after a GID change: %d, want %d", gids.DevicesGen, down.DevicesGen+1)
	}
	idx := func(s *Snapshot) []int {
		for _, d := range s.Node.RDMADevices {
			if d.Name == "mlx5_9" {
				return d.Ports[0].RoCEv2GIDIndexes
			}
		}
		return nil
	}
	if got := idx(gids); len(got) != 2 || got[1] != 3 {
		t.Errorf("RoCE v2 indexes after the change: %v, want [1 3]", got)
	}
	if got := idx(down); len(got) != 1 {
		t.Errorf("the earlier snapshot's indexes changed to %v", got)
	}
}

// TestEventsSelectDevices: an event about a netdev of no RDMA device (a
// pod's veth) re-reads nothing, one about a device's netdev re-reads that
// device, one about an unknown netdev re-reads every device.
func TestEventsSelectDevices(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}})
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	defer w.states.Close()
	snap, _ := w.Latest()
	var req gidRequest
	w.poke(Event{Netdev: "veth1a2b3c"})
	if w.takeEvents(&req) || req.all || len(req.devs) > 0 {
		t.Errorf("veth event: %+v, want nothing to re-read", req)
	}
	w.poke(Event{Netdev: "gpu0rdma0v1"})
	if !w.takeEvents(&req) || req.all || len(req.devs) != 1 {
		t.Fatalf("VF netdev event: %+v, want one device", req)
	}
	for i := range req.devs {
		if got := snap.Node.RDMADevices[i].Name; got != "mlx5_9" {
			t.Errorf("VF netdev event re-reads %s, want mlx5_9", got)
		}
	}
	w.poke(Event{})
	if !w.takeEvents(&req) || !req.all {
		t.Errorf("unknown event: %+v, want every device", req)
	}
}

// TestIdleTickDoesNotAllocate: a tick on an unchanged node allocates nothing.
func TestIdleTickDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.HGX())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}})
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	defer w.states.Close()
	defer w.list.Close()
	if allocs := testing.AllocsPerRun(50, func() { w.refresh(time.Now(), gidRequest{}) }); allocs != 0 {
		t.Errorf("an idle tick allocates %.0f times, want 0", allocs)
	}
}

// TestSweepRereadsPortsWithoutEvents: with no event source, a GID change is
// still picked up by the sweep of the ticks.
func TestSweepRereadsPortsWithoutEvents(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}, Interval: 10 * time.Millisecond})
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	first, changed := w.Latest()
	port := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_9/ports/1")
	for file, v := range map[string]string{"gids/3": "0000:0000:0000:0000:0000:ffff:0a01:0909", "gid_attrs/types/3": "RoCE v2", "gid_attrs/ndevs/3": "gpu0rdma0v1"} {
		if err := os.WriteFile(filepath.Join(port, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	// 13 devices at 10 ms a tick, 8 every 8th tick: one sweep is about 160 ms.
	deadline := time.After(5 * time.Second)
	for {
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("GID change not seen within 5 s")
		}
		var s *Snapshot
		s, changed = w.Latest()
		if s.DevicesGen > first.DevicesGen {
			return
		}
	}
}

// TestDeviceRecreatedDuringScan: a device removed after a rescan listed
// class/infiniband but before it read the devices, and added back under the
// same name (an rxe link re-created on a netdev moved back from a pod), is
// published again by the next refresh: the listing's sum is of entries, not
// names, so the new entry is a change.
func TestDeviceRecreatedDuringScan(t *testing.T) {
	topo := nodesim.RoCESRIOV()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}})
	if err := w.Scan(); err != nil {
		t.Fatal(err)
	}
	defer w.states.Close()
	const dev = "mlx5_9"
	var spec *nodesim.RDMA
	for i := range topo.RDMA {
		if topo.RDMA[i].Name == dev {
			spec = &topo.RDMA[i]
		}
	}
	if spec == nil {
		t.Fatalf("%s not in the topology", dev)
	}
	has := func() bool {
		s, _ := w.Latest()
		for _, d := range s.Node.RDMADevices {
			if d.Name == dev {
				return true
			}
		}
		return false
	}
	if !has() {
		t.Fatalf("%s not in the first snapshot", dev)
	}
	// Held open so that the entry added back gets another inode number, as
	// a new sysfs entry always does; a temporary directory could reuse it.
	old, err := unix.Open(filepath.Join(tree.SysRoot, "class/infiniband", dev), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(old) }()
	w.afterSum = func() {
		w.afterSum = nil
		if err := tree.RemoveRDMA(dev); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.rescan(time.Now()); err != nil {
		t.Fatal(err)
	}
	if has() {
		t.Fatalf("%s still published after a scan that ran while it was gone", dev)
	}
	if err := tree.AddRDMA(*spec); err != nil {
		t.Fatal(err)
	}
	w.refresh(time.Now(), gidRequest{})
	if !has() {
		t.Errorf("%s added back under the same name: not published by the next refresh", dev)
	}
}
