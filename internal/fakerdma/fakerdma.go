// Package fakerdma stands in for RDMA netlink in the local-node e2e's
// GPU-aligned phase, and nowhere else: the machine CI runs on has a kernel
// without an RDMA subsystem, so it can neither report the exclusive RDMA
// netns mode a gpuAligned pool needs nor move an RDMA device between
// network namespaces. Everything else in that phase is real (netdev moves
// of veth links, the kubelet, containerd, PodResources).
//
// It is linked only into binaries built with the build tag kuberdma_e2e
// (e2e/local-node/images.sh builds the image localhost/kube-rdma:e2e-fakerdma
// with it); cmd/device-plugin/deps_test.go keeps it out of the shipped ones.
//
// Devices models what the CNI plugin relies on in exclusive mode: an RDMA
// device is in exactly one network namespace, listed only there, and moves
// only from the one it is in. The CNI plugin is a new process for every
// ADD and DEL, so the state is a file (a device not in it is in the host
// namespace), changed under an flock. Not modelled: the kernel returns the
// devices of a namespace that is destroyed to the host one; in the e2e every
// pod's namespace gets its CNI DEL first.
package fakerdma

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// DefaultStateFile is where the e2e's CNI plugin keeps the state when
// $KUBE_RDMA_FAKE_RDMA_STATE is unset.
const DefaultStateFile = "/run/kube-rdma-e2e-fakerdma/state.json"

// StateFile is $KUBE_RDMA_FAKE_RDMA_STATE, else DefaultStateFile.
func StateFile() string {
	if f := os.Getenv("KUBE_RDMA_FAKE_RDMA_STATE"); f != "" {
		return f
	}
	return DefaultStateFile
}

// Mode reports the exclusive netns mode (the daemon's NetnsModeReader).
type Mode struct{}

// NetnsMode is always rdma.NetnsExclusive.
func (Mode) NetnsMode() (rdma.NetnsMode, error) { return rdma.NetnsExclusive, nil }

// Devices implements the CNI plugin's RDMA interface over StateFile.
type Devices struct {
	StateFile string
}

// state maps an RDMA device to the netns it is in (netns.NsHandle.UniqueId),
// for devices that are not in the host namespace.
type state struct {
	Devices map[string]string `json:"devices"`
}

// NetnsMode is always rdma.NetnsExclusive.
func (Devices) NetnsMode(netns.NsHandle) (rdma.NetnsMode, error) { return rdma.NetnsExclusive, nil }

// List returns the devices recorded in ns. The host namespace's devices
// are not known here (they are the ones in sysfs); listing it is an error.
func (d Devices) List(ns netns.NsHandle) ([]string, error) {
	var out []string
	err := d.locked(false, func(s *state, host string) error {
		if ns.UniqueId() == host {
			return fmt.Errorf("fake rdma: list the host namespace: %w", unix.EOPNOTSUPP)
		}
		for name, in := range s.Devices {
			if in == ns.UniqueId() {
				out = append(out, name)
			}
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// Move moves name from one namespace to another; it must be in from, as
// the kernel requires (ENODEV otherwise).
func (d Devices) Move(from netns.NsHandle, name string, to netns.NsHandle) error {
	return d.locked(true, func(s *state, host string) error {
		in, ok := s.Devices[name]
		if !ok {
			in = host
		}
		if in != from.UniqueId() {
			return fmt.Errorf("fake rdma: move %s: not in netns %s: %w", name, from.UniqueId(), unix.ENODEV)
		}
		if to.UniqueId() == host {
			delete(s.Devices, name)
		} else {
			s.Devices[name] = to.UniqueId()
		}
		return nil
	})
}

// AddRxe is not supported: the GPU-aligned phase has no soft-RoCE.
func (Devices) AddRxe(netns.NsHandle, string, string) error {
	return fmt.Errorf("fake rdma: add rxe: %w", unix.EOPNOTSUPP)
}

// DelSoft is not supported: the GPU-aligned phase has no soft-RoCE.
func (Devices) DelSoft(netns.NsHandle, string) error {
	return fmt.Errorf("fake rdma: delete soft device: %w", unix.EOPNOTSUPP)
}

// locked runs f on the state under an exclusive flock, and writes it back
// (atomically) when write is set and f succeeded. host is the UniqueId of
// the calling thread's namespace: the CNI plugin runs in the host one.
func (d Devices) locked(write bool, f func(s *state, host string) error) error {
	h, err := netns.Get()
	if err != nil {
		return fmt.Errorf("fake rdma: current netns: %w", err)
	}
	host := h.UniqueId()
	_ = h.Close()
	if err := os.MkdirAll(filepath.Dir(d.StateFile), 0o700); err != nil {
		return fmt.Errorf("fake rdma: %w", err)
	}
	lock, err := os.OpenFile(d.StateFile+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("fake rdma: %w", err)
	}
	defer func() { _ = lock.Close() }()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("fake rdma: lock: %w", err)
	}
	s := state{Devices: map[string]string{}}
	data, err := os.ReadFile(d.StateFile)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("fake rdma: %w", err)
	default:
		if err := json.Unmarshal(data, &s); err != nil {
			return fmt.Errorf("fake rdma: %s: %w", d.StateFile, err)
		}
		if s.Devices == nil {
			s.Devices = map[string]string{}
		}
	}
	if err := f(&s, host); err != nil || !write {
		return err
	}
	out, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := d.StateFile + ".tmp"
	if err := os.WriteFile(tmp, out, 0o600); err != nil {
		return fmt.Errorf("fake rdma: %w", err)
	}
	if err := os.Rename(tmp, d.StateFile); err != nil {
		return fmt.Errorf("fake rdma: %w", err)
	}
	return nil
}
