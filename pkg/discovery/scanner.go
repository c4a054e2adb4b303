package discovery

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kube-rdma/kube-rdma/internal/natsort"
)

// Scanner reads one node. The zero value is not useful: set SysRoot ("/sys")
// and, to get NVIDIA UUIDs, ProcRoot ("/proc").
type Scanner struct {
	SysRoot  string
	ProcRoot string
	// Workers bounds the goroutines reading devices; 0 means 4.
	Workers int
	// noURing reads attributes one by one even where io_uring is available
	// (tests of that path, A/B benchmarks).
	noURing bool
}

// Scan reads every RDMA device and GPU and computes their affinity. It fails
// only when the roots are unusable; a device it cannot read is skipped and
// named in Node.Warnings.
func (s Scanner) Scan() (*Node, error) {
	if err := s.checkRoots(); err != nil {
		return nil, err
	}
	n := &Node{RDMADevices: []RDMADevice{}, GPUs: []GPU{}, Affinity: []Affinity{}}
	devs, rdmaWarn, err := s.scanRDMA()
	if err != nil {
		return nil, err
	}
	n.RDMADevices = devs
	// The RDMA scan has read the NICs' PCI functions (most of the PCI
	// functions on a node with SR-IOV); the GPU scan need not read them again.
	known := make(map[string]bool, len(devs))
	for _, d := range devs {
		if d.Kind == KindPF || d.Kind == KindVF {
			known[d.PCIAddress] = true
		}
	}
	gpus, gpuWarn, err := s.scanGPUs(known)
	if err != nil {
		return nil, err
	}
	n.GPUs = gpus
	n.Warnings = append(rdmaWarn, gpuWarn...)
	numa := s.numaNodes()
	for _, g := range n.GPUs {
		for _, d := range n.RDMADevices {
			n.Affinity = append(n.Affinity, Affinity{
				GPU: g.PCIAddress, RDMADevice: d.Name, Level: Distance(g.Location(), d.Location(), numa),
			})
		}
	}
	return n, nil
}

// NUMANodes returns how many NUMA nodes the host has (0 when sysfs does not
// say), as Distance wants it.
func (s Scanner) NUMANodes() int { return s.numaNodes() }

func (s Scanner) checkRoots() error {
	if s.SysRoot == "" {
		return fmt.Errorf("sysfs root is not set")
	}
	fi, err := os.Stat(filepath.Join(s.SysRoot, "devices"))
	if err != nil {
		return fmt.Errorf("sysfs root %q is not a sysfs tree: %w", s.SysRoot, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("sysfs root %q is not a sysfs tree: %s is not a directory", s.SysRoot, filepath.Join(s.SysRoot, "devices"))
	}
	if _, err := readDirNames(filepath.Join(s.SysRoot, "devices")); err != nil {
		return fmt.Errorf("sysfs root %q is not readable: %w", s.SysRoot, err)
	}
	if s.ProcRoot != "" {
		if _, err := os.Stat(s.ProcRoot); err != nil {
			return fmt.Errorf("procfs root %q: %w", s.ProcRoot, err)
		}
	}
	return nil
}

func (s Scanner) numaNodes() int {
	names, _ := readDirNames(filepath.Join(s.SysRoot, "devices/system/node"))
	n := 0
	for _, name := range names {
		if rest, ok := strings.CutPrefix(name, "node"); ok {
			if _, err := strconv.Atoi(rest); err == nil {
				n++
			}
		}
	}
	return n
}

func (s Scanner) workers() int {
	if s.Workers > 0 {
		return s.Workers
	}
	return 4
}

// parallel runs fn(w, i) for i in [0, n) on at most workers goroutines; w
// is the goroutine's number, in [0, workers).
func parallel(n, workers int, fn func(w, i int)) {
	if workers > n {
		workers = n
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				fn(w, j)
			}
		})
	}
	wg.Wait()
}

func sortDevices(devs []RDMADevice) {
	slices.SortFunc(devs, func(a, b RDMADevice) int { return natsort.Compare(a.Name, b.Name) })
}
