package deviceplugin

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Health rule: an RDMA device is Healthy when it is present in
// class/infiniband and every one of its ports is ACTIVE. mlx5 exposes one
// port per RDMA device, so this is "port 1" there; on a multi-port device
// (mlx4, a bond) NCCL and most verbs applications use every port of the HCA
// they are given, and a half-up device would silently halve bandwidth or hang
// a collective, so one down port makes the whole device Unhealthy. A device
// with no ports is Unhealthy.

// The idle tick must stay cheap on a node with a thousand devices, so it
// reads one directory (which devices exist) and one already-open state file
// per port, with pread at offset 0: sysfs regenerates an attribute on every
// read from the start, and a read on a removed device fails (ENODEV), which
// forces a full scan. Paths are resolved and opened once per full scan.

// readPresence lists the names in class/infiniband.
func readPresence(sysRoot string) (map[string]bool, error) {
	dir := filepath.Join(sysRoot, "class/infiniband")
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// stateFile is one port's open state attribute.
type stateFile struct {
	dev string
	fd  int
}

// healthReader keeps every known port's state file open between full scans.
type healthReader struct {
	sysRoot string
	files   []stateFile
	devs    map[string]int // device -> its number of ports
}

// reset closes every file and opens the state files of the given ports.
func (h *healthReader) reset(ports map[string][]int) {
	h.close()
	h.devs = make(map[string]int, len(ports))
	for _, dev := range sortedKeys(ports) {
		h.devs[dev] = len(ports[dev])
		for _, p := range ports[dev] {
			path := filepath.Join(h.sysRoot, "class/infiniband", dev, "ports", strconv.Itoa(p), "state")
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				fd = -1 // reads as not ACTIVE; the next scan retries
			}
			h.files = append(h.files, stateFile{dev: dev, fd: fd})
		}
	}
}

func (h *healthReader) close() {
	for _, f := range h.files {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
	}
	h.files = nil
}

// read returns each device's health; gone is true when a file could not be
// read (a removed device), so the caller scans again.
func (h *healthReader) read() (health map[string]bool, gone bool) {
	health = make(map[string]bool, len(h.devs))
	for dev, n := range h.devs {
		health[dev] = n > 0
	}
	var buf [64]byte
	for _, f := range h.files {
		if !health[f.dev] {
			continue
		}
		if f.fd < 0 {
			health[f.dev] = false
			continue
		}
		n, err := unix.Pread(f.fd, buf[:], 0)
		if err != nil || n <= 0 {
			health[f.dev], gone = false, true
			continue
		}
		health[f.dev] = isActive(buf[:n])
	}
	return health, gone
}

// isActive reports whether a state attribute ("4: ACTIVE\n") says ACTIVE,
// without allocating.
func isActive(b []byte) bool {
	i := bytes.IndexByte(b, ':')
	return i >= 0 && string(bytes.TrimSpace(b[i+1:])) == "ACTIVE"
}

// portsOf lists each device's port numbers from a full scan.
func portsOf(devs []discovery.RDMADevice) map[string][]int {
	out := make(map[string][]int, len(devs))
	for _, d := range devs {
		ps := make([]int, 0, len(d.Ports))
		for _, p := range d.Ports {
			ps = append(ps, p.Port)
		}
		out[d.Name] = ps
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
