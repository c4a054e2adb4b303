package quarantine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMove(t *testing.T) {
	dir := t.TempDir()
	qdir := filepath.Join(dir, "quarantine")
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.FixedZone("x", 3600))
	cause := errors.New("unexpected end of JSON input")
	var moved []string
	for i, data := range []string{`{"torn`, `{"torn again`, `third`} {
		path := filepath.Join(dir, "rec.json")
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		got, fi, err := ReadFile(path)
		if err != nil || string(got) != data {
			t.Fatalf("ReadFile = %q, %v", got, err)
		}
		d := Move(path, qdir, "rec.json", fi, now, cause)
		if d.Moved == "" || !errors.Is(&d, ErrDamaged) || !errors.Is(&d, cause) {
			t.Fatalf("move %d: %+v, want moved, wrapping ErrDamaged and its cause", i, d)
		}
		if kept, err := os.ReadFile(d.Moved); err != nil || string(kept) != data {
			t.Errorf("%s holds %q, %v; want %q", d.Moved, kept, err, data)
		}
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still in place: %v", path, err)
		}
		moved = append(moved, filepath.Base(d.Moved))
	}
	// One name per file, the earlier ones kept: the time, UTC, then a count.
	want := []string{"rec.json.20260102T140405Z", "rec.json.20260102T140405Z.1", "rec.json.20260102T140405Z.2"}
	if diff := cmp.Diff(want, moved); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if n, err := Count(qdir); n != 3 || err != nil {
		t.Errorf("Count = %d, %v; want 3", n, err)
	}
	if n, err := Count(filepath.Join(dir, "none")); n != 0 || err != nil {
		t.Errorf("Count of no dir = %d, %v; want 0, nil", n, err)
	}
}

// A file replaced by a writer's rename between the read and the move is the
// writer's good one: it stays.
func TestMoveLeavesAReplacedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	if err := os.WriteFile(path, []byte(`{"to`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, fi, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".tmp")
	if err := os.WriteFile(tmp, []byte(`{"good":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	d := Move(path, filepath.Join(dir, "q"), "rec.json", fi, time.Now(), errors.New("torn"))
	if d.Moved != "" || d.Err == nil {
		t.Errorf("Move = %+v, want not moved, with why", d)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != `{"good":true}` {
		t.Errorf("%s = %q, %v; want the writer's record", path, data, err)
	}
}

func TestMoveReadOnly(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only directory")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rec.json")
	if err := os.WriteFile(path, []byte(`{`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	d := Move(path, filepath.Join(dir, "q"), "rec.json", nil, time.Now(), errors.New("torn"))
	if d.Moved != "" || d.Err == nil || !errors.Is(&d, ErrDamaged) {
		t.Errorf("Move in a read-only dir = %+v, want not moved, with why", d)
	}
}
