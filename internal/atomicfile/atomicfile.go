// Package atomicfile writes a file so that readers see the old content or the
// new, never a part: a temporary file in the same directory, then rename.
// It is the one home of that sequence (CNI records, CDI specs, the CNI
// binary's self-install).
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data. The temporary file is named after pattern
// (os.CreateTemp's form, e.g. ".kube-rdma-*.tmp") in path's directory, which
// must exist, so readers that list the directory can skip it; it is removed
// on any failure. perm is applied before the rename.
func Write(path string, data []byte, perm os.FileMode, pattern string) error {
	f, err := os.CreateTemp(filepath.Dir(path), pattern)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op once renamed
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
