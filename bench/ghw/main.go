// Command ghw times kube-rdma's discovery against the PCI scan the peer
// device plugins start with (k8s-rdma-shared-dev-plugin and
// sriov-network-device-plugin call github.com/jaypipes/ghw's PCI()), on the
// same synthetic sysfs tree, interleaved in one process.
//
// It is a module of its own so that ghw never becomes a dependency of the
// binaries kube-rdma ships.
//
// What each side does per call:
//   - ours: discovery.Scanner.Scan(): every RDMA device (PCI identity, NUMA
//     node, driver, SR-IOV link, netdevs, ports, GID tables with types and
//     netdevs, char devices), every GPU (identity, NVIDIA procfs UUID) and
//     the GPU x NIC affinity matrix.
//   - ghw: ghw.PCI(WithChroot, WithDisableTopology): loads the pci.ids
//     database (it does so on every call unless the caller passes a loaded
//     one), then for every PCI function reads modalias and revision and
//     resolves driver, parent and IOMMU group links. Topology (NUMA, CPUs,
//     caches) is off: with it ghw would also scan devices/system/node.
//
// ghw's pci.ids comes from the host (Debian: apt-get install pci.ids),
// copied into the tree; network fetch is disabled.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/jaypipes/ghw"
	"github.com/jaypipes/pcidb"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func main() {
	rounds := flag.Int("rounds", 15, "timed rounds; each runs both sides once, in alternating order")
	node := flag.String("node", "synthetic", "canned node: "+fmt.Sprint(nodesim.Names()))
	ids := flag.String("pci-ids", "", "pci.ids database (default: the first of /usr/share/hwdata/pci.ids, /usr/share/misc/pci.ids)")
	flag.Parse()
	if err := run(*rounds, *node, *ids); err != nil {
		fmt.Fprintln(os.Stderr, "bench-ghw:", err)
		os.Exit(1)
	}
}

func run(rounds int, node, ids string) error {
	topo, ok := nodesim.Named(node)
	if !ok {
		return fmt.Errorf("unknown node %q", node)
	}
	ids, err := findPCIIDs(ids)
	if err != nil {
		return err
	}
	root, err := os.MkdirTemp("", "bench-ghw-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	tree, err := nodesim.Build(root, topo)
	if err != nil {
		return err
	}
	dbPath, err := installPCIIDs(root, ids)
	if err != nil {
		return err
	}
	scanner := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}
	pciFuncs, err := os.ReadDir(filepath.Join(tree.SysRoot, "bus/pci/devices"))
	if err != nil {
		return err
	}
	sides, err := newSides(scanner, root, dbPath, len(pciFuncs))
	if err != nil {
		return err
	}
	fmt.Printf("node %s: %d PCI functions, pci.ids %s\n", topo.Name, len(pciFuncs), ids)
	if err := timeRounds(sides, rounds); err != nil {
		return err
	}
	report(sides, rounds)
	return nil
}

// findPCIIDs returns ids, or if it is "" the first pci.ids database found on the host.
func findPCIIDs(ids string) (string, error) {
	if ids != "" {
		return ids, nil
	}
	for _, p := range []string{"/usr/share/hwdata/pci.ids", "/usr/share/misc/pci.ids"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no pci.ids database on this host (Debian: apt-get install pci.ids), or pass -pci-ids")
}

// installPCIIDs copies ids into the tree at root and points pcidb at the copy.
func installPCIIDs(root, ids string) (string, error) {
	// ghw reads pci.ids through pcidb, which ignores ghw's chroot: point it
	// at the copy in the tree and forbid the network.
	dbPath := filepath.Join(root, "usr/share/misc/pci.ids")
	if err := copyFile(ids, dbPath); err != nil {
		return "", err
	}
	os.Setenv("PCIDB_PATH", dbPath)
	os.Setenv("PCIDB_ENABLE_NETWORK_FETCH", "0")
	return dbPath, nil
}

// side is one timed contender and its measurements.
type side struct {
	name string
	fn   func() error
	d    []time.Duration // wall clock
	cpu  []time.Duration // user+system time of the process, all threads
}

// newSides returns the contenders: our scan, ghw with and without a loaded
// pci.ids, and loading pci.ids alone; nPCI is the PCI functions ghw must find.
func newSides(scanner discovery.Scanner, root, dbPath string, nPCI int) ([]side, error) {
	ours := func() error {
		n, err := scanner.Scan()
		if err != nil {
			return err
		}
		if len(n.Warnings) != 0 || len(n.RDMADevices) == 0 {
			return fmt.Errorf("discovery: %d rdma devices, warnings %v", len(n.RDMADevices), n.Warnings)
		}
		return nil
	}
	theirs := func(opts ...any) func() error {
		opts = append([]any{ghw.WithChroot(root), ghw.WithDisableTopology(), ghw.WithDisableWarnings()}, opts...)
		return func() error {
			info, err := ghw.PCI(opts...)
			if err != nil {
				return err
			}
			if len(info.Devices) != nPCI {
				return fmt.Errorf("ghw: %d PCI devices, want %d", len(info.Devices), nPCI)
			}
			if v := info.Devices[len(info.Devices)-1].Vendor.Name; v == "unknown" {
				return fmt.Errorf("ghw: vendor of %s not in pci.ids", info.Devices[len(info.Devices)-1].Address)
			}
			return nil
		}
	}
	db, err := pcidb.New()
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dbPath, err)
	}
	return []side{
		{name: "ours", fn: ours},
		{name: "ghw", fn: theirs()},
		{name: "ghw-preloaded-db", fn: theirs(ghw.WithPCIDB(db))},
		{name: "pcidb-load", fn: func() error { _, err := pcidb.New(); return err }},
	}, nil
}

// timeRounds runs two warm-up rounds, then rounds timed ones, each running
// every side once in alternating order, and records the timings.
func timeRounds(sides []side, rounds int) error {
	for r := -2; r < rounds; r++ { // two warm-up rounds
		order := []int{0, 1, 2, 3}
		if r%2 != 0 {
			slices.Reverse(order)
		}
		for _, i := range order {
			runtime.GC()
			cpu0 := cpuTime()
			start := time.Now()
			if err := sides[i].fn(); err != nil {
				return err
			}
			if r >= 0 {
				sides[i].d = append(sides[i].d, time.Since(start))
				sides[i].cpu = append(sides[i].cpu, cpuTime()-cpu0)
			}
		}
	}
	return nil
}

// report prints each side's figures and the ours/ghw ratios.
func report(sides []side, rounds int) {
	for _, s := range sides {
		fmt.Printf("%-17s median %7.1f ms  (min %6.1f, max %6.1f, %d rounds)  cpu median %7.1f ms\n", s.name,
			ms(median(s.d)), ms(slices.Min(s.d)), ms(slices.Max(s.d)), len(s.d), ms(median(s.cpu)))
	}
	ratios := make([]time.Duration, rounds) // per-round ours/ghw, x1000
	for i := range rounds {
		ratios[i] = sides[0].d[i] * 1000 / sides[1].d[i]
	}
	fmt.Printf("ratio ours/ghw: %.2f (medians), %.2f (median of per-round ratios); cpu time %.2f\n",
		float64(median(sides[0].d))/float64(median(sides[1].d)), float64(median(ratios))/1000,
		float64(median(sides[0].cpu))/float64(median(sides[1].cpu)))
}

// cpuTime is the user and system time the process has used, all threads
// (our scan runs several goroutines, ghw one).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
