package discovery_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestPortStatesAndListRDMA runs the health reads both ways: batched through
// io_uring (where this kernel allows it) and pread one by one.
func TestPortStatesAndListRDMA(t *testing.T) {
	for _, batched := range []bool{true, false} {
		t.Run(map[bool]string{true: "io_uring", false: "pread"}[batched], func(t *testing.T) {
			testPortStates(t, batched)
		})
	}
}

func testPortStates(t *testing.T, batched bool) {
	n, tree := scan(t, nodesim.PortDown())
	list, err := discovery.ListRDMA(tree.SysRoot, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"mlx5_0", "mlx5_1"}, list); diff != "" {
		t.Errorf("ListRDMA (-want +got)\n%s", diff)
	}
	ports := map[string][]int{}
	for _, d := range n.RDMADevices {
		ports[d.Name] = []int{1}
	}
	ports["gone0"] = []int{1} // no such device: its file cannot be opened
	ps := discovery.OpenPortStates(tree.SysRoot, ports)
	defer ps.Close()
	if !batched {
		ps.OneByOne()
	} else if !ps.UseRing() {
		t.Skip("io_uring is not available here (kernel, seccomp or io_uring_disabled); the pread subtest covers the reads")
	}
	health := map[string]bool{}
	if gone := ps.Read(health); gone {
		t.Error("gone on a present node")
	}
	if diff := cmp.Diff(map[string]bool{"mlx5_0": true, "mlx5_1": false, "gone0": false}, health); diff != "" {
		t.Errorf("health (-want +got)\n%s", diff)
	}
	if err := tree.SetPortState("mlx5_1", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	if err := tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	if changed, gone := ps.Poll(); !changed || gone {
		t.Errorf("Poll after mlx5_0 down and mlx5_1 up: changed %v, gone %v; want changed", changed, gone)
	}
	if changed, _ := ps.Poll(); changed {
		t.Error("Poll with nothing changed since the last one: changed")
	}
	ps.Health(health)
	if health["mlx5_0"] || !health["mlx5_1"] {
		t.Errorf("after mlx5_0 down and mlx5_1 up: %v", health)
	}
	if allocs := testing.AllocsPerRun(100, func() { ps.Read(health) }); allocs != 0 && !raceEnabled {
		t.Errorf("Read allocates %.0f times per call, want 0", allocs)
	}
	if empty, err := discovery.ListRDMA(t.TempDir(), nil); err != nil || len(empty) != 0 {
		t.Errorf("ListRDMA without class/infiniband = %v, %v; want empty", empty, err)
	}
}

// BenchmarkReadPortStates reads the port states of 1,024 devices both ways
// (io_uring and one pread per port), interleaved in one run so that their
// ratio is measured under the same load, and says which way OpenPortStates
// chose. CPU is the process's (getrusage), so io_uring's worker threads
// count. Two trees: the synthetic node's (files on the test's file system)
// and one whose state files are symbolic links to a real sysfs attribute
// (/sys/class/net/lo/operstate: kernfs and seq_file, as the port state
// attribute of the RDMA core is).
func BenchmarkReadPortStates(b *testing.B) {
	for _, tc := range []struct {
		name string
		tree func(b *testing.B) (string, map[string][]int)
	}{{"fixture", fixturePorts}, {"kernfs", kernfsPorts}} {
		b.Run(tc.name, func(b *testing.B) {
			root, ports := tc.tree(b)
			auto := discovery.OpenPortStates(root, ports)
			chose := map[bool]string{true: "io_uring", false: "pread"}[auto.Batched()]
			auto.Close()
			ring := discovery.OpenPortStates(root, ports)
			defer ring.Close()
			if !ring.UseRing() {
				b.Skip("io_uring is not available here")
			}
			plain := discovery.OpenPortStates(root, ports)
			defer plain.Close()
			plain.OneByOne()
			health := map[string]bool{}
			var viaRing, viaPread time.Duration
			n := 0
			for b.Loop() {
				viaRing += cpuOf(b, func() { ring.Read(health) })
				viaPread += cpuOf(b, func() { plain.Read(health) })
				n++
			}
			b.ReportMetric(float64(viaRing.Nanoseconds())/float64(n), "uring-cpu-ns/read")
			b.ReportMetric(float64(viaPread.Nanoseconds())/float64(n), "pread-cpu-ns/read")
			b.ReportMetric(float64(viaRing)/float64(viaPread), "uring/pread")
			b.Logf("OpenPortStates chose %s", chose)
		})
	}
}

func fixturePorts(b *testing.B) (string, map[string][]int) {
	tree, err := nodesim.Build(b.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		b.Fatal(err)
	}
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		b.Fatal(err)
	}
	ports := map[string][]int{}
	for _, d := range n.RDMADevices {
		for _, p := range d.Ports {
			ports[d.Name] = append(ports[d.Name], p.Port)
		}
	}
	return tree.SysRoot, ports
}

func kernfsPorts(b *testing.B) (string, map[string][]int) {
	const attr = "/sys/class/net/lo/operstate"
	if _, err := os.Stat(attr); err != nil {
		b.Skipf("no sysfs attribute to read: %v", err)
	}
	root := b.TempDir()
	ports := map[string][]int{}
	for i := range 1024 {
		dev := fmt.Sprintf("dev%04d", i)
		dir := filepath.Join(root, "class/infiniband", dev, "ports/1")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink(attr, filepath.Join(dir, "state")); err != nil {
			b.Fatal(err)
		}
		ports[dev] = []int{1}
	}
	return root, ports
}

// cpuOf returns the process's CPU time (user and system) that f took.
func cpuOf(b *testing.B, f func()) time.Duration {
	var r0, r1 unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &r0); err != nil {
		b.Fatal(err)
	}
	f()
	if err := unix.Getrusage(unix.RUSAGE_SELF, &r1); err != nil {
		b.Fatal(err)
	}
	return time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
}

func TestReadPortCounters(t *testing.T) {
	_, tree := scan(t, nodesim.PortDown())
	dir := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_0/ports/1/hw_counters")
	if err := os.WriteFile(filepath.Join(dir, "out_of_buffer"), []byte("7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "garbage"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	discovery.ReadPortCounters(tree.SysRoot, "mlx5_0", 1, func(src, name string, v float64) { got[src+"/"+name] = v })
	want := map[string]float64{"counters/port_rcv_data": 0, "counters/port_xmit_data": 0, "counters/port_rcv_packets": 0,
		"counters/port_xmit_packets": 0, "hw_counters/out_of_buffer": 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// TestRereadPortsMatchesScan: on every sample node, re-reading a device's
// ports gives what Scan gave.
func TestRereadPortsMatchesScan(t *testing.T) {
	for _, name := range nodesim.Names() {
		if name == "synthetic" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			topo, _ := nodesim.Named(name)
			n, tree := scan(t, topo)
			s := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}
			for _, d := range n.RDMADevices {
				got, err := s.RereadPorts(d)
				if err != nil {
					t.Fatalf("%s: %v", d.Name, err)
				}
				if diff := cmp.Diff(d, got); diff != "" {
					t.Errorf("%s (-scan +reread)\n%s", d.Name, diff)
				}
			}
		})
	}
}

// TestRereadPortsSeesNewGIDs: an address added to a RoCE netdev fills GID
// slots; RereadPorts sees them.
func TestRereadPortsSeesNewGIDs(t *testing.T) {
	n, tree := scan(t, nodesim.RoCESRIOV())
	d := device(t, n, "mlx5_9")
	if diff := cmp.Diff([]int{1}, d.Ports[0].RoCEv2GIDIndexes); diff != "" {
		t.Fatalf("before (-want +got)\n%s", diff)
	}
	port := filepath.Join(tree.SysRoot, "class/infiniband/mlx5_9/ports/1")
	for file, v := range map[string]string{"gids/3": "0000:0000:0000:0000:0000:ffff:0a01:0909", "gid_attrs/types/3": "RoCE v2", "gid_attrs/ndevs/3": "gpu0rdma0v1"} {
		if err := os.WriteFile(filepath.Join(port, file), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := discovery.Scanner{SysRoot: tree.SysRoot}.RereadPorts(d)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 3}, got.Ports[0].RoCEv2GIDIndexes); diff != "" {
		t.Errorf("after (-want +got)\n%s", diff)
	}
	if err := tree.RemoveRDMA("mlx5_9"); err != nil {
		t.Fatal(err)
	}
	if _, err := (discovery.Scanner{SysRoot: tree.SysRoot}).RereadPorts(d); err == nil {
		t.Error("RereadPorts of a removed device: no error")
	}
}

func TestRDMAListSum(t *testing.T) {
	topo := nodesim.PortDown()
	_, tree := scan(t, topo)
	l := discovery.OpenRDMAList(tree.SysRoot)
	defer l.Close()
	n0, s0, err := l.Sum()
	if err != nil || n0 != 2 {
		t.Fatalf("Sum = %d, %v; want 2 entries", n0, err)
	}
	if n, s, _ := l.Sum(); n != n0 || s != s0 {
		t.Errorf("second Sum %d/%x differs from the first %d/%x", n, s, n0, s0)
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _, _ = l.Sum() }); allocs != 0 && !raceEnabled {
		t.Errorf("Sum allocates %.0f times per call, want 0", allocs)
	}
	// The removed entry is held open (O_PATH, not followed) so that its inode
	// number is not reused by the entry added back, as sysfs never reuses one.
	old, err := unix.Open(filepath.Join(tree.SysRoot, "class/infiniband/mlx5_1"), unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Close(old) }()
	if err := tree.RemoveRDMA("mlx5_1"); err != nil {
		t.Fatal(err)
	}
	if n, s, _ := l.Sum(); n != 1 || s == s0 {
		t.Errorf("after a removal: %d entries, sum changed %v; want 1, true", n, s != s0)
	}
	if err := tree.AddRDMA(topo.RDMA[1]); err != nil {
		t.Fatal(err)
	}
	// The same names, but mlx5_1 is a new entry: a watcher whose scan ran
	// while it was gone must see a change and scan again.
	n1, s1, _ := l.Sum()
	if n1 != n0 || s1 == s0 {
		t.Errorf("after adding it back: %d entries, sum changed %v; want %d, true", n1, s1 != s0, n0)
	}
	if n, s, _ := l.Sum(); n != n1 || s != s1 {
		t.Errorf("Sum after adding it back is not stable: %d/%x then %d/%x", n1, s1, n, s)
	}
	empty := discovery.OpenRDMAList(t.TempDir())
	if n, s, err := empty.Sum(); n != 0 || s != 0 || err != nil {
		t.Errorf("missing class dir: %d, %x, %v", n, s, err)
	}
}
