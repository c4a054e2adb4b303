package discovery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestScanBatchedEqualsOneByOne: the io_uring batches (where the kernel has
// io_uring) and the one-by-one reads see the same node on every canned node.
func TestScanBatchedEqualsOneByOne(t *testing.T) {
	if r, err := newRing(); err != nil {
		t.Logf("no io_uring here (%v): both scans read one by one", err)
	} else {
		r.close()
	}
	for _, name := range nodesim.Names() {
		t.Run(name, func(t *testing.T) {
			topo, _ := nodesim.Named(name)
			tree, err := nodesim.Build(t.TempDir(), topo)
			if err != nil {
				t.Fatal(err)
			}
			s := Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}
			want, err := Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, noURing: true}.Scan()
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Scan()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("batched scan differs (-one by one +batched):\n%s", diff)
			}
		})
	}
}

// BenchmarkScanURing times the 1,024-device scan with and without io_uring
// batches, interleaved, and reports both medians.
func BenchmarkScanURing(b *testing.B) {
	tree, err := nodesim.Build(b.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		b.Fatal(err)
	}
	var one, batched []time.Duration
	for b.Loop() {
		for _, no := range []bool{true, false} {
			start := time.Now()
			if _, err := (Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, noURing: no}).Scan(); err != nil {
				b.Fatal(err)
			}
			if no {
				one = append(one, time.Since(start))
			} else {
				batched = append(batched, time.Since(start))
			}
		}
	}
	med := func(d []time.Duration) float64 { slices.Sort(d); return float64(d[len(d)/2]) / 1e6 }
	b.ReportMetric(med(one), "one-by-one-ms")
	b.ReportMetric(med(batched), "batched-ms")
}

// TestScanClosesFiles: the batches leave no file open (their files are
// closed with the next batch and the last ones when the ring closes).
func TestScanClosesFiles(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	fds := func() int {
		names, err := readDirNames("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(names)
	}
	before := fds()
	for range 3 {
		if _, err := (Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}).Scan(); err != nil {
			t.Fatal(err)
		}
	}
	if after := fds(); after != before {
		t.Errorf("%d open files before three scans, %d after", before, after)
	}
}

// TestRingReadsSysfs: on this machine's real sysfs (kernfs, not the ext4 or
// tmpfs of the fixtures) the ring reads what one-by-one reads read, errors
// included.
func TestRingReadsSysfs(t *testing.T) {
	r, err := newRing()
	if err != nil {
		t.Skipf("no io_uring here: %v", err)
	}
	defer r.close()
	names, _ := readDirNames("/sys/bus/pci/devices")
	if len(names) == 0 {
		t.Skip("no PCI devices in /sys")
	}
	var reqs []attrReq
	for _, n := range names {
		d, err := openDir("/sys/bus/pci/devices/" + n)
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		for _, a := range []string{"vendor", "device", "class", "numa_node", "uevent", "no-such-attribute"} {
			reqs = append(reqs, attrReq{d: d, rel: a})
		}
	}
	r.readAll(reqs)
	for _, q := range reqs {
		v, err := q.d.readNow(q.rel)
		if v != q.val || fmt.Sprint(err) != fmt.Sprint(q.err) {
			t.Errorf("%s/%s: ring read %q, %v; one by one %q, %v", q.d.path, q.rel, q.val, q.err, v, err)
		}
	}
}
