package discovery

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// readAttr reads a small sysfs attribute by absolute path and trims white
// space (see dir.read).
func readAttr(path string) (string, error) {
	return dir{fd: unix.AT_FDCWD}.read(path)
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
	defer func() { _ = f.Close() }()
	return f.Readdirnames(-1)
}

// pciTopology splits a real device path under <sys>/devices into its host
// bridge ("pci0000:15") and the chain of PCI functions below it down to and
// including the last PCI function on the path. The host bridge is usually
// the first component, but not always: a Hyper-V (Azure) guest's PCI buses
// hang off VMBus ("LNXSYSTM:00/.../VMBUS:00/<guid>/pci0101:00/..."). Behind
// an Intel VMD controller a second, nested host bridge component appears
// ("pci10000:e0"); the functions below it stay on the first one's path.
func pciTopology(devicesDir, real string) (root string, path []string) {
	rel, err := filepath.Rel(devicesDir, real)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", nil
	}
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		switch {
		case root == "" && IsHostBridge(c):
			root = c
		case root != "" && IsPCIAddress(c):
			path = append(path, strings.ToLower(c))
		}
	}
	return root, path
}
