package cniinstall

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

type fileID struct {
	ino   uint64
	mtime time.Time
	mode  os.FileMode
}

func identify(t *testing.T, path string) fileID {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileID{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime(), fi.Mode()}
}

func chainEdit(b []byte) ([]byte, bool, error) { return Chain(b, []byte(ours), versions) }

func TestEditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "10-calico.conflist")
	write(t, path, conflistOf(calico), 0o640)
	before := identify(t, path)

	changed, err := editFile(path, chainEdit)
	if err != nil || !changed {
		t.Fatalf("first edit: changed %v, %v", changed, err)
	}
	got, _ := os.ReadFile(path)
	checkSame(t, conflistOf(calico, ours), got)
	after := identify(t, path)
	if after.ino == before.ino {
		t.Error("the file was written in place, not replaced by a rename")
	}
	if after.mode != 0o640 {
		t.Errorf("mode %v, want the original 0640", after.mode)
	}
	if diff := cmp.Diff([]string{"10-calico.conflist"}, names(t, dir)); diff != "" {
		t.Errorf("directory (-want +got), no temporary left:\n%s", diff)
	}

	// Idempotent: no write at all.
	changed, err = editFile(path, chainEdit)
	if err != nil || changed {
		t.Fatalf("second edit: changed %v, %v", changed, err)
	}
	if again := identify(t, path); again != after {
		t.Errorf("second edit touched the file: %+v, was %+v", again, after)
	}

	// A refused conflist is left alone, with no temporary.
	write(t, path, `{"cniVersion":"0.2.0","plugins":[{"type":"bridge"}]}`, 0o640)
	if _, err := editFile(path, chainEdit); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("edit of a 0.2.0 conflist = %v, want ErrUnsupportedVersion", err)
	}
	if diff := cmp.Diff([]string{"10-calico.conflist"}, names(t, dir)); diff != "" {
		t.Errorf("directory (-want +got):\n%s", diff)
	}
}

// A conflist that is a symbolic link: its target is edited and the link kept.
func TestEditFileFollowsLink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "calico.conflist")
	if err := os.Mkdir(filepath.Dir(real), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, real, conflistOf(calico), 0o644)
	link := filepath.Join(dir, "10-calico.conflist")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := editFile(link, chainEdit); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link replaced: %v, %v", fi, err)
	}
	got, _ := os.ReadFile(real)
	checkSame(t, conflistOf(calico, ours), got)
}

func TestFirstConflist(t *testing.T) {
	dir := t.TempDir()
	if _, err := FirstConflist(dir); !errors.Is(err, ErrNoConflist) {
		t.Errorf("empty dir: %v, want ErrNoConflist", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "00-dir.conflist"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"05-a.conf", "10-b.json", ".10-calico.conflist.123", "20-z.conflist", "10-calico.conflist"} {
		write(t, filepath.Join(dir, n), "{}", 0o644)
	}
	if got, err := FirstConflist(dir); err != nil || got != "10-calico.conflist" {
		t.Errorf("FirstConflist = %q, %v; want 10-calico.conflist", got, err)
	}
	if _, err := FirstConflist(filepath.Join(dir, "missing")); err == nil || errors.Is(err, ErrNoConflist) {
		t.Errorf("missing dir: %v, want another error", err)
	}
}

func TestInstallBinary(t *testing.T) {
	src := filepath.Join(t.TempDir(), "exe")
	content := bytes.Repeat([]byte("\x7fELF binary "), 20000) // several read buffers
	write(t, src, string(content), 0o700)
	dir := t.TempDir()
	dst := filepath.Join(dir, BinaryName)

	changed, err := InstallBinary(src, dir)
	if err != nil || !changed {
		t.Fatalf("install: changed %v, %v", changed, err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, content) {
		t.Error("installed binary differs from its source")
	}
	first := identify(t, dst)
	if first.mode != 0o755 {
		t.Errorf("mode %v, want 0755", first.mode)
	}
	if changed, err := InstallBinary(src, dir); err != nil || changed {
		t.Errorf("same content: changed %v, %v; want no copy", changed, err)
	}
	if again := identify(t, dst); again != first {
		t.Errorf("same content: the file was touched: %+v, was %+v", again, first)
	}

	// Same size, one byte differs; then another mode: copied again.
	content[len(content)-1] = 'X'
	write(t, src, string(content), 0o700)
	if changed, err := InstallBinary(src, dir); err != nil || !changed {
		t.Errorf("new content: changed %v, %v", changed, err)
	}
	if identify(t, dst).ino == first.ino {
		t.Error("new content written in place, not renamed over the old binary")
	}
	if err := os.Chmod(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if changed, err := InstallBinary(src, dir); err != nil || !changed || identify(t, dst).mode != 0o755 {
		t.Errorf("mode 0700: changed %v, %v; want a copy with mode 0755", changed, err)
	}
	if diff := cmp.Diff([]string{BinaryName}, names(t, dir)); diff != "" {
		t.Errorf("bin dir (-want +got), no temporary left:\n%s", diff)
	}
}

// A failed copy leaves the installed binary as it was, and no temporary.
func TestInstallBinaryFailure(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, BinaryName), "old", 0o755)
	if _, err := InstallBinary(filepath.Join(dir, "missing"), dir); err == nil {
		t.Error("install of a missing source succeeded")
	}
	// A source that fails mid-read: a directory opens, but cannot be read.
	if _, err := InstallBinary(t.TempDir(), dir); err == nil {
		t.Error("install of an unreadable source succeeded")
	}
	if got, _ := os.ReadFile(filepath.Join(dir, BinaryName)); string(got) != "old" {
		t.Errorf("installed binary now %q, want the old one", got)
	}
	if diff := cmp.Diff([]string{BinaryName}, names(t, dir)); diff != "" {
		t.Errorf("bin dir (-want +got), no temporary left:\n%s", diff)
	}
}
