package discovery

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// dir is an open directory whose attributes are read with openat and
// readlinkat: the kernel walks the short relative path, not the dozen PCI
// components above it. On a node with a thousand devices the path walk is
// a quarter of discovery's time.
type dir struct {
	fd   int
	path string
	// pre leads every relative path: a PCI function is read through its
	// RDMA device's directory as "../../vendor", which saves opening and
	// closing the function's own directory (two system calls per device).
	pre string
	// cache holds what a batch read ahead (see prefetch); nil for none.
	cache *attrCache
}

func openDir(path string) (dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return dir{fd: -1}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return dir{fd: fd, path: path}, nil
}

// sub is the directory rel ("../..") below d, read through d's descriptor;
// path names it in errors. Closing it closes nothing.
func (d dir) sub(pre, path string) dir {
	return dir{fd: d.fd, path: path, pre: d.pre + pre, cache: d.cache}
}

func (d dir) close() {
	if d.fd >= 0 && d.pre == "" {
		_ = unix.Close(d.fd)
	}
}

// read reads a small attribute below the directory and trims white space.
// It uses raw syscalls: os.ReadFile's stat and poller registration double
// the cost on a node with a thousand devices.
func (d dir) read(rel string) (string, error) {
	if d.cache != nil {
		if r, ok := d.cache.attrs[attrKey{d.fd, d.pre + rel}]; ok {
			return r.val, r.err
		}
	}
	return d.readNow(rel)
}

// readNow reads an attribute with open, read and close.
func (d dir) readNow(rel string) (string, error) {
	fd, err := unix.Openat(d.fd, d.pre+rel, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: filepath.Join(d.path, rel), Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	var buf [512]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: filepath.Join(d.path, rel), Err: err}
		}
		n += m
		// sysfs fills an attribute in one show() call: a short read is the
		// whole value, and a second read only to see EOF would add a third
		// of the syscalls of a scan.
		if m == 0 || n < len(buf) {
			break
		}
	}
	return attrValue(buf[:n]), nil
}

// attrValue is an attribute's value: no sysfs value holds a NUL, so what
// follows one is padding, as in a tree copied with tar, which pads each
// attribute to its stat size (4096); white space is trimmed.
func attrValue(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimSpace(string(b))
}

// parsed reads an attribute and parses it; the error names the file.
func (d dir) parsed(rel string, parse func(string) (string, error)) (string, error) {
	v, err := d.read(rel)
	if err != nil {
		return "", err
	}
	out, err := parse(v)
	if err != nil {
		return "", &fs.PathError{Op: "parse", Path: filepath.Join(d.path, rel), Err: err}
	}
	return out, nil
}

// linkBase returns the last element of a symlink's target; "" with a nil
// error when the link does not exist.
func (d dir) linkBase(rel string) (string, error) {
	var buf [512]byte
	n, err := unix.Readlinkat(d.fd, d.pre+rel, buf[:])
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: filepath.Join(d.path, rel), Err: err}
	}
	return filepath.Base(string(buf[:n])), nil
}

// names lists the entries of a directory below d; a missing one is empty.
func (d dir) names(rel string) ([]string, error) {
	if d.cache != nil {
		if r, ok := d.cache.lists[attrKey{d.fd, d.pre + rel}]; ok {
			return r.names, r.err
		}
		names, err := d.namesNow(rel)
		d.cache.lists[attrKey{d.fd, d.pre + rel}] = listResult{names, err}
		return names, err
	}
	return d.namesNow(rel)
}

func (d dir) namesNow(rel string) ([]string, error) {
	fd, err := unix.Openat(d.fd, d.pre+rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: filepath.Join(d.path, rel), Err: err}
	}
	defer func() { _ = unix.Close(fd) }()
	return d.readNames(fd, rel)
}

// readNames lists an open directory, rel below d.
func (d dir) readNames(fd int, rel string) ([]string, error) {
	var out []string
	var buf [8192]byte
	for {
		n, err := unix.ReadDirent(fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: filepath.Join(d.path, rel), Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		_, _, out = unix.ParseDirent(buf[:n], -1, out)
	}
}
