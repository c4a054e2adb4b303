package discovery

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// readAttr reads a small sysfs attribute and trims white space. It uses raw
// syscalls: os.ReadFile's stat and poller registration double the cost on a
// node with a thousand devices.
func readAttr(path string) (string, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var buf [512]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "read", Path: path, Err: err}
		}
		n += m
		// sysfs fills an attribute in one show() call: a short read is the
		// whole value, and a second read only to see EOF would add a third
		// of the syscalls of a scan.
		if m == 0 || n < len(buf) {
			break
		}
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// readLinkBase returns the last element of a symlink's target ("mlx5_core"
// for a driver link); "" with a nil error when the link does not exist.
func readLinkBase(path string) (string, error) {
	t, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(t), nil
}

// resolveClassLink resolves a /sys/class/<c>/<name> or /sys/bus/*/devices/<name>
// entry to the device's real directory with one readlink. It does not check
// that the target exists: the caller's first open of it does.
func resolveClassLink(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	t, err := os.Readlink(p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(pe.Err, unix.EINVAL) {
			return p, nil // a real directory, as in some container sysfs views
		}
		return "", err
	}
	if filepath.IsAbs(t) {
		return t, nil
	}
	return filepath.Join(dir, t), nil
}

// readDirNames lists a directory's entry names; a missing directory is empty.
func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// pciTopology splits a real device path under <sys>/devices into its host
// bridge ("pci0000:15") and the chain of PCI functions down to and including
// the last PCI function on the path.
func pciTopology(devicesDir, real string) (root string, path []string) {
	rel, err := filepath.Rel(devicesDir, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", nil
	}
	comps := strings.Split(rel, string(filepath.Separator))
	if len(comps) == 0 || !strings.HasPrefix(comps[0], "pci") {
		return "", nil
	}
	for _, c := range comps[1:] {
		if IsPCIAddress(c) {
			path = append(path, strings.ToLower(c))
		}
	}
	return comps[0], path
}
