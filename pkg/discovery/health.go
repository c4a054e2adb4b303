package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Health rule: an RDMA device is healthy when it is present in
// class/infiniband and every one of its ports is ACTIVE. mlx5 exposes one
// port per RDMA device, so this is "port 1" there; on a multi-port device
// (mlx4, a bond) NCCL and most verbs applications use every port of the HCA
// they are given, and a half-up device would silently halve bandwidth or hang
// a collective, so one down port makes the whole device unhealthy. A device
// with no ports is unhealthy.
//
// A watcher re-reads health often on a node with a thousand devices, so
// PortStates reads one already-open state file per port with pread at offset
// 0: sysfs regenerates an attribute on every read from the start, and a read
// on a removed device fails (ENODEV), which tells the caller to scan again.
// Paths are resolved and opened once per full scan.
//
// Two ways to read them: one pread per port, or the preads of one Read
// handed to the kernel through io_uring in batches of up to 256. Which is
// cheaper depends on the kernel and the machine, so OpenPortStates measures
// both on the files it opened and keeps the faster (io_uring only when it
// is clearly faster). Measured (BenchmarkReadPortStates, both paths in one
// run, figures in docs/device-plugin.md): on real sysfs attributes
// (kernfs, seq_file: no non-blocking reads, so io_uring hands every read
// to its worker threads) io_uring costs about 1.9x the CPU of pread on a
// 6.18 kernel; on the ext4 fixture 1.2x; on an earlier paravirtualised VM
// where a system call cost as much as the read, io_uring was 4x cheaper.
// Where io_uring is missing or forbidden, pread.

// ListRDMA returns the sorted names in class/infiniband; a missing class
// directory (no RDMA driver loaded) is an empty list. buf is reused when it
// has room.
func ListRDMA(sysRoot string, buf []string) ([]string, error) {
	dir := filepath.Join(sysRoot, "class/infiniband")
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return buf[:0], nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	defer func() { _ = f.Close() }()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	slices.Sort(names)
	return append(buf[:0], names...), nil
}

// PortStates keeps the state attribute of every port of a set of devices
// open, to read their health cheaply and repeatedly.
type PortStates struct {
	files []stateFile
	devs  []string // sorted device names
	nport []int    // ports per device, parallel to devs
	ring  *ring    // nil: pread one by one
	buf   []byte   // stateBuf bytes per file, for the ring
	res   []int32  // each file's read result, for the ring
	// healthy is the last Poll's result per device (parallel to devs), next
	// the buffer the next Poll fills.
	healthy, next []bool
}

// stateBuf holds a state attribute ("4: ACTIVE\n").
const stateBuf = 64

type stateFile struct {
	dev int // index into devs
	fd  int
}

// OpenPortStates opens the state files of the given ports (device name ->
// port numbers) below sysRoot. A file that cannot be opened reads as not
// ACTIVE. Close releases the files.
func OpenPortStates(sysRoot string, ports map[string][]int) *PortStates {
	p := &PortStates{}
	for dev := range ports {
		p.devs = append(p.devs, dev)
	}
	slices.Sort(p.devs)
	for i, dev := range p.devs {
		p.nport = append(p.nport, len(ports[dev]))
		for _, n := range ports[dev] {
			path := filepath.Join(sysRoot, "class/infiniband", dev, "ports", strconv.Itoa(n), "state")
			fd, err := openNoATime(path)
			if err != nil {
				fd = -1
			}
			p.files = append(p.files, stateFile{dev: i, fd: fd})
		}
	}
	p.choosePath()
	return p
}

// ringMargin: io_uring is kept only when a Read through it takes less than
// this fraction of a Read by pread; the plain path has no worker threads
// and no ring memory.
const ringMargin = 0.8

// choosePath times a few Reads each way on the open files and keeps the
// ring only when it is clearly faster: a few milliseconds per full scan on
// the 1,024-device node, against 2 Reads a second for as long as it runs.
func (p *PortStates) choosePath() {
	if len(p.files) == 0 || !p.useRing() {
		return
	}
	scratch := make(map[string]bool, len(p.devs))
	viaRing := p.bestOf(scratch)
	r := p.ring
	p.ring = nil
	viaPread := p.bestOf(scratch)
	if r != nil && float64(viaRing) < ringMargin*float64(viaPread) {
		p.ring = r
		return
	}
	r.close() // nil when a Read already failed over to pread
	p.buf, p.res = nil, nil
}

// bestOf returns the shortest of three Reads, after one to warm up.
func (p *PortStates) bestOf(health map[string]bool) time.Duration {
	p.Read(health)
	best := time.Duration(math.MaxInt64)
	for range 3 {
		start := time.Now()
		p.Read(health)
		best = min(best, time.Since(start))
	}
	return best
}

// useRing sets up the ring for Read; false when io_uring is unavailable.
func (p *PortStates) useRing() bool {
	if p.ring != nil {
		return true
	}
	r, err := newRing()
	if err != nil {
		return false
	}
	p.ring, p.buf, p.res = r, make([]byte, len(p.files)*stateBuf), make([]int32, len(p.files))
	return true
}

// oneByOne stops using the ring (io_uring_enter failed): pread from now on.
func (p *PortStates) oneByOne() {
	p.ring.close()
	p.ring = nil
}

// Close closes every open state file.
func (p *PortStates) Close() {
	if p == nil {
		return
	}
	for _, f := range p.files {
		if f.fd >= 0 {
			_ = unix.Close(f.fd)
		}
	}
	p.files = nil
	if p.ring != nil {
		p.oneByOne()
	}
}

// Read fills health (device name -> healthy) for every device it holds,
// without allocating when health already has their keys. gone is true when
// a file could not be read: a removed device, so the caller scans again.
func (p *PortStates) Read(health map[string]bool) (gone bool) {
	_, gone = p.Poll()
	p.Health(health)
	return gone
}

// Poll reads every port's state. changed reports whether any device's
// health differs from the previous Poll's (true on the first); gone is as
// Read's. It allocates nothing and touches no map: the idle daemon polls
// twice a second, and filling and comparing a map of 1,024 names was about
// a twentieth of its CPU.
func (p *PortStates) Poll() (changed, gone bool) {
	if p.healthy == nil {
		p.healthy, p.next = make([]bool, len(p.devs)), make([]bool, len(p.devs))
		changed = true
	}
	next := p.next
	for i := range p.devs {
		next[i] = p.nport[i] > 0
	}
	if p.ring != nil && !p.ring.preadStates(p.files, p.buf, p.res) {
		p.oneByOne()
	}
	var buf [stateBuf]byte
	for i, f := range p.files {
		if !next[f.dev] {
			continue
		}
		if f.fd < 0 {
			next[f.dev] = false
			continue
		}
		var state []byte
		if p.ring != nil {
			if n := p.res[i]; n > 0 {
				state = p.buf[i*stateBuf : i*stateBuf+int(n)]
			}
		} else if n, err := rawPread(f.fd, buf[:]); err == nil && n > 0 {
			state = buf[:n]
		}
		if state == nil {
			next[f.dev], gone = false, true
			continue
		}
		next[f.dev] = isActive(state)
	}
	changed = changed || !slices.Equal(next, p.healthy)
	p.healthy, p.next = next, p.healthy
	return changed, gone
}

// Health fills health with the last Poll's result (nothing before one).
func (p *PortStates) Health(health map[string]bool) {
	for i, ok := range p.healthy {
		health[p.devs[i]] = ok
	}
}

// isActive reports whether a state attribute ("4: ACTIVE\n") says ACTIVE,
// without allocating.
func isActive(b []byte) bool {
	i := bytes.IndexByte(b, ':')
	return i >= 0 && string(bytes.TrimSpace(b[i+1:])) == "ACTIVE"
}

// Healthy applies the health rule to a scanned device: every port ACTIVE,
// at least one port.
func (d RDMADevice) Healthy() bool {
	for _, p := range d.Ports {
		if !p.Active() {
			return false
		}
	}
	return len(d.Ports) > 0
}

func fnv64(b []byte) uint64 { return fnv64add(14695981039346656037, b) }

// fnv64add continues the FNV-1a hash h over b.
func fnv64add(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
