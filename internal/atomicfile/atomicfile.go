// Package atomicfile writes a file so that readers see the old content or the
// new, never a part: a temporary file in the same directory, then rename.
// It is the one home of that sequence (CNI records, CDI specs, the CNI
// binary's self-install and its conflist entry).
package atomicfile

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data. The temporary file is named after pattern
// (os.CreateTemp's form, e.g. ".kube-rdma-*.tmp") in path's directory, which
// must exist, so readers that list the directory can skip it; it is removed
// on any failure. perm is applied before the rename.
func Write(path string, data []byte, perm os.FileMode, pattern string) error {
	return write(path, perm, pattern, false, Bytes(data))
}

// WriteSynced is Write for files that must be whole after a machine crash
// too (a binary a runtime execs, a CNI configuration, the on-disk contracts
// of pkg/hostapi that outlive a boot): fill writes the content (Bytes(data)
// for a slice), the temporary file is fsynced before the rename and the
// directory after it.
func WriteSynced(path string, perm os.FileMode, pattern string, fill func(io.Writer) error) error {
	return write(path, perm, pattern, true, fill)
}

// Bytes is a fill function for WriteSynced that writes data.
func Bytes(data []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}
}

func write(path string, perm os.FileMode, pattern string, sync bool, fill func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(f.Name()) }() // no-op once renamed
	err = fill(f)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil && sync {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
