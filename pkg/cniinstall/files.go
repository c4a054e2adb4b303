package cniinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
)

// BinaryName is the installed binary's name in the CNI bin directory.
const BinaryName = "kube-rdma"

// ErrNoConflist is returned by FirstConflist when the directory holds no
// conflist.
var ErrNoConflist = errors.New("no *.conflist")

// confExts are the extensions libcni (and so containerd and CRI-O) loads
// network configurations from.
var confExts = []string{".conf", ".conflist", ".json"}

// FirstConflist returns the name of the first *.conflist in dir in lexical
// order, the one libcni's ConfFiles and containerd pick among conflists;
// ErrNoConflist when there is none. Like libcni it skips directories only.
func FirstConflist(dir string) (string, error) {
	ents, err := os.ReadDir(dir) // sorted by name
	if err != nil {
		return "", fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.IsDir() && filepath.Ext(e.Name()) == ".conflist" {
			return e.Name(), nil
		}
	}
	return "", fmt.Errorf("%s: %w", dir, ErrNoConflist)
}

// editFile applies edit to the file at path and, when it changed something,
// replaces the file atomically (.<name>.<random> in its directory, fsync,
// rename), keeping its mode. A symbolic link is followed and its target
// replaced. When the file changes between the read and the rename (another
// writer), the edit starts again from the new content, up to three times.
func editFile(path string, edit func([]byte) ([]byte, bool, error)) (changed bool, err error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false, fmt.Errorf("resolve %s: %w", path, err)
	}
	for range 3 {
		before, err := os.Stat(real)
		if err != nil {
			return false, fmt.Errorf("stat %s: %w", path, err)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", path, err)
		}
		out, changed, err := edit(data)
		if err != nil || !changed {
			return false, err
		}
		now, err := os.Stat(real)
		if err != nil {
			return false, fmt.Errorf("stat %s: %w", path, err)
		}
		if !os.SameFile(before, now) || !before.ModTime().Equal(now.ModTime()) || before.Size() != now.Size() {
			continue // rewritten under us: edit the new content
		}
		pattern := "." + filepath.Base(real) + ".*"
		err = atomicfile.WriteSynced(real, before.Mode().Perm(), pattern, func(w io.Writer) error {
			_, err := w.Write(out)
			return err
		})
		return err == nil, err
	}
	return false, fmt.Errorf("edit %s: it kept changing under us", path)
}

// WriteNodeFile writes the plugin's node file (netconf.Node, its host
// paths) into the CNI bin directory dir, next to the binary, atomically
// (mode 0644, fsync, rename). It writes nothing (changed false) when the
// file holds the same bytes already.
func WriteNodeFile(dir string, n netconf.Node) (changed bool, err error) {
	b, err := n.Marshal()
	if err != nil {
		return false, err
	}
	dst := filepath.Join(dir, netconf.NodeFileName)
	if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, b) {
		return false, nil
	}
	err = atomicfile.WriteSynced(dst, 0o644, "."+netconf.NodeFileName+".*", func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("write node file: %w", err)
	}
	return true, nil
}

// InstallBinary copies src (the running binary, /proc/self/exe) to
// dir/kube-rdma: .kube-rdma.<random> in dir, mode 0755, fsync, rename, so a
// runtime execs the old binary or the new one, never a part. It copies
// nothing (changed false) when the installed file has the same content and
// mode already.
func InstallBinary(src, dir string) (changed bool, err error) {
	in, err := os.Open(src)
	if err != nil {
		return false, fmt.Errorf("open %s: %w", src, err)
	}
	defer func() { _ = in.Close() }()
	dst := filepath.Join(dir, BinaryName)
	if same, err := sameFile(in, dst); err != nil || same {
		return false, err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return false, fmt.Errorf("read %s: %w", src, err)
	}
	err = atomicfile.WriteSynced(dst, 0o755, "."+BinaryName+".*", func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("install binary: %w", err)
	}
	return true, nil
}

// sameFile reports whether the file at path has src's content and mode 0755.
func sameFile(src *os.File, path string) (bool, error) {
	dst, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s: %w", path, err)
	}
	defer func() { _ = dst.Close() }()
	si, err := src.Stat()
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", src.Name(), err)
	}
	di, err := dst.Stat()
	if err != nil {
		return false, fmt.Errorf("stat %s: %w", path, err)
	}
	if !di.Mode().IsRegular() || di.Mode().Perm() != 0o755 || di.Size() != si.Size() {
		return false, nil
	}
	bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
	for {
		na, errA := io.ReadFull(src, bufA)
		nb, errB := io.ReadFull(dst, bufB)
		if !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		if errA == io.EOF || errA == io.ErrUnexpectedEOF {
			return errB == errA, nil
		}
		if errA != nil {
			return false, fmt.Errorf("read %s: %w", src.Name(), errA)
		}
		if errB != nil {
			return false, fmt.Errorf("read %s: %w", path, errB)
		}
	}
}

// confNamesPlugin returns the first network configuration in dir (the files
// libcni would load) that names kube-rdma, "" when none does.
func confNamesPlugin(dir string) (string, error) {
	if dir == "" { // no conf dir given (not chained): none to name it
		return "", nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("list %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() || !slices.Contains(confExts, filepath.Ext(e.Name())) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", fmt.Errorf("read %s: %w", e.Name(), err)
		}
		if NamesPlugin(data) {
			return e.Name(), nil
		}
	}
	return "", nil
}

// plainName checks that name is a file name, not a path.
func plainName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00")
}
