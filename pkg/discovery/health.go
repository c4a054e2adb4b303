package discovery

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

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
// Paths are resolved and opened once per full scan. Where io_uring works the
// preads of one Read go to the kernel in batches of up to 256 (four
// io_uring_enter calls instead of 1,024 pread calls on the 1,024-device
// node; BenchmarkReadPortStates measures both paths in one run, figures in
// docs/device-plugin.md). Where io_uring is missing or forbidden, pread one
// by one.

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
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				fd = -1
			}
			p.files = append(p.files, stateFile{dev: i, fd: fd})
		}
	}
	if r, err := newRing(); err == nil {
		p.ring, p.buf, p.res = r, make([]byte, len(p.files)*stateBuf), make([]int32, len(p.files))
	}
	return p
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
	for i, dev := range p.devs {
		health[dev] = p.nport[i] > 0
	}
	if p.ring != nil && !p.ring.preadStates(p.files, p.buf, p.res) {
		p.oneByOne()
	}
	var buf [stateBuf]byte
	for i, f := range p.files {
		dev := p.devs[f.dev]
		if !health[dev] {
			continue
		}
		if f.fd < 0 {
			health[dev] = false
			continue
		}
		var state []byte
		if p.ring != nil {
			if n := p.res[i]; n > 0 {
				state = p.buf[i*stateBuf : i*stateBuf+int(n)]
			}
		} else if n, err := unix.Pread(f.fd, buf[:], 0); err == nil && n > 0 {
			state = buf[:n]
		}
		if state == nil {
			health[dev], gone = false, true
			continue
		}
		health[dev] = isActive(state)
	}
	return gone
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

func fnv64(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}
