package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	for _, content := range []string{"one", "two, longer"} {
		if err := Write(path, []byte(content), 0o640, ".t-*.tmp"); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read back %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(ents))
	}
}

func TestWriteFailureLeavesOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("old"), 0o644, ".t-*"); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename: the old file name is a
	// non-empty directory, which rename cannot replace.
	sub := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(sub, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(sub, []byte("new"), 0o644, ".t-*"); err == nil {
		t.Fatal("write over a non-empty directory succeeded")
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644, ".t-*"); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("directory holds %d entries, want 2 (no temporary left)", len(ents))
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("old file now %q", got)
	}
}

func TestWriteSynced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bin")
	if err := WriteSynced(path, 0o755, ".bin.*", func(w io.Writer) error {
		_, err := io.WriteString(w, "content")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("stat: %v, %v; want mode 0755", fi, err)
	}
	failed := errors.New("fill failed")
	if err := WriteSynced(path, 0o755, ".bin.*", func(w io.Writer) error {
		_, _ = io.WriteString(w, "part") // the write fails the fill below either way
		return failed
	}); !errors.Is(err, failed) {
		t.Errorf("failing fill: %v, want %v", err, failed)
	}
	if got, _ := os.ReadFile(path); string(got) != "content" {
		t.Errorf("file now %q, want the old content", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(ents))
	}
}
