package discovery

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RDMAList answers "has the set of entries in class/infiniband changed?"
// without allocating: it keeps the directory open and sums a hash of each
// entry's name and inode number read with getdents into a reused buffer.
// The inode number counts: a device removed and added again under the same
// name (an rxe link re-created on a netdev moved back from a pod, a driver
// reloaded) is a new sysfs entry, and a watcher whose scan ran in the gap
// would otherwise see an unchanged sum and never scan the new device. An idle watcher asks twice
// a second on a node with a thousand devices; ListRDMA would allocate a
// thousand strings each time.
type RDMAList struct {
	path string
	fd   int
	buf  []byte
}

// OpenRDMAList prepares to list <sysRoot>/class/infiniband; Close releases it.
func OpenRDMAList(sysRoot string) *RDMAList {
	return &RDMAList{path: filepath.Join(sysRoot, "class/infiniband"), fd: -1, buf: make([]byte, 16<<10)}
}

// Sum returns the number of entries and an order-independent hash of their
// names and inode numbers; a missing directory is 0, 0.
func (l *RDMAList) Sum() (n int, sum uint64, err error) {
	if l.fd < 0 {
		fd, err := unix.Open(l.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			return 0, 0, nil
		}
		if err != nil {
			return 0, 0, &fs.PathError{Op: "open", Path: l.path, Err: err}
		}
		l.fd = fd
	}
	if err := rawRewind(l.fd); err != nil {
		l.Close() // the directory was removed: open it again next time
		return 0, 0, nil
	}
	for {
		m, err := rawGetdents(l.fd, l.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, &fs.PathError{Op: "getdents", Path: l.path, Err: err}
		}
		if m <= 0 {
			return n, sum, nil
		}
		for b := l.buf[:m]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			ino := b[:8]
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if string(name) == "." || string(name) == ".." {
				continue
			}
			n++
			sum += fnv64add(fnv64(name), ino)
		}
	}
}

// Close closes the directory.
func (l *RDMAList) Close() {
	if l != nil && l.fd >= 0 {
		_ = unix.Close(l.fd)
		l.fd = -1
	}
}
