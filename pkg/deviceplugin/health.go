package deviceplugin

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

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

// probe is the cheap, sub-second view of the node: which RDMA devices exist
// (and where their class link points) and the state of each known port. It
// reads one directory, one link per device and one state file per port.
type probe struct {
	links  map[string]string // device -> class link target
	health map[string]bool   // device -> all ports ACTIVE
}

// readPresence lists class/infiniband with each entry's link target.
func readPresence(sysRoot string) (map[string]string, error) {
	dir := filepath.Join(sysRoot, "class/infiniband")
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("list rdma devices: %w", err)
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		t, err := os.Readlink(filepath.Join(dir, n))
		if err != nil {
			t = "" // a real directory in some container views
		}
		out[n] = t
	}
	return out, nil
}

// readHealth reads the state of the given ports of each device.
func readHealth(sysRoot string, ports map[string][]int) map[string]bool {
	out := make(map[string]bool, len(ports))
	var buf [64]byte
	for dev, ps := range ports {
		ok := len(ps) > 0
		for _, p := range ps {
			if !ok {
				break
			}
			path := filepath.Join(sysRoot, "class/infiniband", dev, "ports", strconv.Itoa(p), "state")
			ok = readState(path, buf[:]) == "ACTIVE"
		}
		out[dev] = ok
	}
	return out
}

// readState reads "4: ACTIVE" and returns "ACTIVE"; "" on any error.
func readState(path string, buf []byte) string {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	n, err := unix.Read(fd, buf)
	if err != nil || n <= 0 {
		return ""
	}
	_, v, ok := strings.Cut(strings.TrimSpace(string(buf[:n])), ":")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
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

// healthFromScan derives health from a full scan, by the same rule.
func healthFromScan(devs []discovery.RDMADevice) map[string]bool {
	out := make(map[string]bool, len(devs))
	for _, d := range devs {
		ok := len(d.Ports) > 0
		for _, p := range d.Ports {
			ok = ok && p.Active()
		}
		out[d.Name] = ok
	}
	return out
}

func sameKeys[V any](a map[string]V, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
