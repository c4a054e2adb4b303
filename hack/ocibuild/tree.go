package main

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// entry is one path of the image's file system.
type entry struct {
	kind   byte   // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	perm   int64  // unix permission bits, setuid/setgid/sticky included
	src    string // regular file: where the content is read from
	target string // symlink
}

// unixPerm returns the unix permission bits of m, which keeps setuid, setgid and sticky apart.
func unixPerm(m fs.FileMode) int64 {
	p := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		p |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		p |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		p |= 0o1000
	}
	return p
}

// tree is the image's file system, keyed by clean relative path ("usr/local/bin/x").
// Parent directories are implied; a later entry for the same path replaces an earlier one.
type tree struct {
	entries map[string]entry
}

func (t *tree) put(dst string, e entry) {
	if t.entries == nil {
		t.entries = map[string]entry{}
	}
	rel := strings.TrimPrefix(path.Clean("/"+dst), "/")
	if rel == "" {
		return
	}
	t.entries[rel] = e
}

func (t *tree) addDir(dst string, perm int64) {
	t.put(dst, entry{kind: tar.TypeDir, perm: perm})
}

// addFile adds the regular file src at dst; mode 0 keeps the source's permissions.
func (t *tree) addFile(src, dst string, perm int64) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("add file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("add file %s: not a regular file", src)
	}
	if perm == 0 {
		perm = unixPerm(st.Mode())
	}
	t.put(dst, entry{kind: tar.TypeReg, perm: perm, src: src})
	return nil
}

// addTree adds every directory, regular file and symlink below dir under dst. Symlinks are
// kept as they are (an unpacked Debian package's /lib64/ld-linux-x86-64.so.2, for instance).
func (t *tree) addTree(dir, dst string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("add tree %s: %w", dir, err)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("add tree %s: %w", dir, err)
		}
		switch {
		case d.IsDir():
			t.put(target, entry{kind: tar.TypeDir, perm: unixPerm(info.Mode())})
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("add tree %s: %w", dir, err)
			}
			t.put(target, entry{kind: tar.TypeSymlink, perm: 0o777, target: l})
		case d.Type().IsRegular():
			t.put(target, entry{kind: tar.TypeReg, perm: unixPerm(info.Mode()), src: p})
		default:
			return fmt.Errorf("add tree %s: %s is neither a file, a directory nor a symlink", dir, p)
		}
		return nil
	})
}

// writeTar writes the tree as a tar stream: sorted paths, each parent directory before its
// children, owner 0:0 without names, every time mtime.
func (t *tree) writeTar(w io.Writer, mtime time.Time) error {
	all := map[string]entry{}
	for p, e := range t.entries {
		all[p] = e
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := all[d]; !ok {
				if _, explicit := t.entries[d]; !explicit {
					all[d] = entry{kind: tar.TypeDir, perm: 0o755}
				}
			}
		}
	}
	paths := make([]string, 0, len(all))
	for p := range all {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		e := all[p]
		h := &tar.Header{Name: p, Mode: e.perm, Typeflag: e.kind, ModTime: mtime, Format: tar.FormatPAX}
		switch e.kind {
		case tar.TypeDir:
			h.Name = p + "/"
		case tar.TypeSymlink:
			h.Linkname = e.target
		default:
			st, err := os.Stat(e.src)
			if err != nil {
				return fmt.Errorf("write layer: %w", err)
			}
			h.Size = st.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write layer entry %s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyFile(tw, e.src, h.Size); err != nil {
				return fmt.Errorf("write layer entry %s: %w", p, err)
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	n, err := io.Copy(w, f)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("%s changed size while being read", src)
	}
	return nil
}

// splitMode splits "DST[:MODE]"; MODE is octal.
func splitMode(s string, def int64) (string, int64, error) {
	dst, m, ok := strings.Cut(s, ":")
	if !ok {
		return dst, def, nil
	}
	v, err := strconv.ParseUint(m, 8, 32)
	if err != nil || v > 0o7777 {
		return "", 0, fmt.Errorf("mode %q is not octal permissions", m)
	}
	return dst, int64(v), nil
}
