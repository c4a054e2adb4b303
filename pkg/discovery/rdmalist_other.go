//go:build !linux

package discovery

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// RDMAList answers "has the set of names in class/infiniband changed?". RDMA
// devices exist on Linux only: this portable version (os.ReadDir, which
// allocates) is here so that tools reading discovery's types, such as
// kubectl-rdma, build for other systems; the daemon runs the Linux one.
type RDMAList struct{ path string }

// OpenRDMAList prepares to list <sysRoot>/class/infiniband; Close releases it.
func OpenRDMAList(sysRoot string) *RDMAList {
	return &RDMAList{path: filepath.Join(sysRoot, "class/infiniband")}
}

// Sum returns the number of entries and an order-independent hash of their
// names (not their inode numbers, as the Linux one does); a missing
// directory is 0, 0.
func (l *RDMAList) Sum() (n int, sum uint64, err error) {
	ents, err := os.ReadDir(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		n++
		sum += fnv64([]byte(e.Name()))
	}
	return n, sum, nil
}

// Close releases nothing.
func (l *RDMAList) Close() {}
