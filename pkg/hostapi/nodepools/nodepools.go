// Package nodepools is the node's pools file: which RDMA devices are in which
// pool of this node, as the daemon serves them. The daemon writes it on every
// change of its pools or of their members; the CNI plugin reads it to refuse
// a deviceID that is in no pool (docs/security.md, "The CNI netconf").
//
// The file is <alloc dir>/_pools.json: the daemon's --pools-file, the CNI's
// node file allocDir (both the chart's devicePlugin.allocDir). A pool name
// begins with a letter or a digit, so no pool directory of the alloc dir
// (package allocdir) has this name.
//
// It is a versioned contract (internal/contractver, docs/upgrades.md): Read
// accepts Version (the first, so only it for now) and refuses a newer one by
// name. A file that does not decode is moved aside (internal/quarantine) and
// is then missing. It imports the standard library and internal/ only, does
// no I/O but the file's and its quarantine's, and no logging.
package nodepools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// FileName is the pools file's name in the alloc dir.
const FileName = "_pools.json"

// LentFileName is the node agent's own file beside the pools file: the
// devices lent to pods as it last saw them, so that a restarted daemon keeps
// them in their pools (no other program reads it; uninstall removes it with
// the pools file).
const LentFileName = "_lent-devices.json"

// LentPath is the lent-devices file beside the pools file at poolsFile.
func LentPath(poolsFile string) string { return filepath.Join(filepath.Dir(poolsFile), LentFileName) }

// Version is the format this binary writes.
const Version = 1

var format = contractver.Format{Kind: "pools file", Key: "version", First: 1, Current: Version}

// Path is <allocDir>/_pools.json.
func Path(allocDir string) string { return filepath.Join(allocDir, FileName) }

// File is the node's served pools, sorted by name.
type File struct {
	Pools []Pool `json:"pools"`
}

// Pool is one served pool (device plugin or DRA front end) and its members.
type Pool struct {
	Name string `json:"name"`
	// Mode is the pool's mode ("exclusive", "shared").
	Mode string `json:"mode"`
	// Frontend is "devicePlugin" or "dra".
	Frontend string `json:"frontend"`
	// AllowConfiguredNetdevs lets the CNI plugin move a member's netdev
	// that the host has configured (addresses of its own, or a master):
	// the pool's allowConfiguredNetdevs. Absent (an older daemon) is false.
	AllowConfiguredNetdevs bool     `json:"allowConfiguredNetdevs,omitempty"`
	Devices                []Device `json:"devices"`
}

// Device is one member: its RDMA device name and PCI function ("" for a
// soft-RoCE device, which has none).
type Device struct {
	RDMA       string `json:"rdma"`
	PCIAddress string `json:"pciAddress,omitempty"`
}

// fileJSON is the file as stored: the version, then the pools.
type fileJSON struct {
	Version int `json:"version"`
	File
}

// Marshal encodes the file as the daemon writes it: Version, pools and
// devices sorted, indented, ending in a newline.
func (f File) Marshal() ([]byte, error) {
	out := File{Pools: make([]Pool, 0, len(f.Pools))}
	for _, p := range f.Pools {
		p.Devices = slices.Clone(p.Devices)
		if p.Devices == nil {
			p.Devices = []Device{}
		}
		slices.SortFunc(p.Devices, func(a, b Device) int { return strings.Compare(a.RDMA, b.RDMA) })
		out.Pools = append(out.Pools, p)
	}
	slices.SortFunc(out.Pools, func(a, b Pool) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(fileJSON{Version: Version, File: out}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode pools file: %w", err)
	}
	return append(b, '\n'), nil
}

// Write replaces path with data (Marshal's) atomically and durably, mode
// 0644 (the CNI plugin reads it), creating its directory with mode 0755
// when it is missing.
func Write(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write pools file: %w", err)
	}
	if err := atomicfile.WriteSynced(path, 0o644, ".kube-rdma-*.tmp", atomicfile.Bytes(data)); err != nil {
		return fmt.Errorf("write pools file: %w", err)
	}
	return nil
}

// QuarantineDir is the directory, beside the pools file, where Read moves
// a file that does not decode (as _pools.json.<time>): the alloc dir's
// (allocdir.QuarantineDir, the same name).
const QuarantineDir = "_quarantine"

// Read reads the pools file at path. A missing file wraps fs.ErrNotExist
// (no daemon has published this node's pools); one of a version this binary
// does not read wraps contractver.ErrNewer (or ErrOlder). One that does not
// decode (torn, truncated, not a pools file) is moved to _quarantine/ beside
// it with its bytes: the error is a *quarantine.Damaged (the caller logs
// it) that wraps fs.ErrNotExist too: the file is missing now, until the
// daemon writes it again (it checks that it is there: pkg/agent).
func Read(path string) (File, error) {
	b, read, err := quarantine.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("read pools file: %w", err)
	}
	var verr *contractver.VersionError
	if _, err := format.Check(path, b); errors.As(err, &verr) {
		return File{}, err
	} else if err != nil {
		return File{}, moveAside(path, read, err)
	}
	var f fileJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&f); err != nil {
		return File{}, moveAside(path, read, fmt.Errorf("decode pools file %s: %w", path, err))
	}
	for _, p := range f.Pools {
		if p.Name == "" {
			return File{}, fmt.Errorf("pools file %s: a pool without a name", path)
		}
	}
	return f.File, nil
}

func moveAside(path string, read os.FileInfo, cause error) error {
	d := quarantine.Move(path, filepath.Join(filepath.Dir(path), QuarantineDir), filepath.Base(path), read, time.Now(), cause)
	return fmt.Errorf("%w: %w", &d, fs.ErrNotExist)
}

// PoolOf returns the pool whose members include the device: by PCI address
// when both have one (case-insensitive, as sysfs and users may differ), by
// RDMA device name otherwise.
func (f File) PoolOf(rdma, pciAddress string) (string, bool) {
	for _, p := range f.Pools {
		for _, d := range p.Devices {
			if pciAddress != "" && d.PCIAddress != "" {
				if strings.EqualFold(pciAddress, d.PCIAddress) {
					return p.Name, true
				}
				continue
			}
			if rdma != "" && d.RDMA == rdma {
				return p.Name, true
			}
		}
	}
	return "", false
}

// Pool modes, as Pool.Mode says them.
const (
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// SlotID is the kubelet device ID of slot i of a shared device plugin pool,
// "<pool>-<i>": every slot stands for all of the pool's devices. The device
// plugin advertises these, the CNI plugin reads them back (SharedSlot), so
// the form is part of this contract.
func SlotID(pool string, i int) string { return pool + "-" + strconv.Itoa(i) }

// Lookup returns the pool called name.
func (f File) Lookup(name string) (Pool, bool) {
	for _, p := range f.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return Pool{}, false
}

// SharedSlot returns the shared pool of the device plugin of which id is a
// slot (SlotID).
func (f File) SharedSlot(id string) (Pool, bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 || strings.Trim(id[i+1:], "0123456789") != "" {
		return Pool{}, false
	}
	p, ok := f.Lookup(id[:i])
	if !ok || p.Mode != ModeShared || p.Frontend == "dra" {
		return Pool{}, false
	}
	return p, true
}
