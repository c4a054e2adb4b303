package allocdir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// TestTornPoolFileMovedAside: a pool.json that does not decode costs its
// own pool only: it is moved to <root>/_quarantine/ with its bytes, the
// error says so and is "missing" from then on; another pool reads; a pool
// file of a newer version is refused in place.
func TestTornPoolFileMovedAside(t *testing.T) {
	root := t.TempDir()
	good, err := PoolFile{Pool: "b", Resource: "r/b", Binding: BindingGPUAligned, Members: []string{"mlx5_0"}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := WritePoolFile(root, "b", good); err != nil {
		t.Fatal(err)
	}
	for pool, data := range map[string]string{"a": `{"version":2,"pool":"a","mem`, "c": "", "d": `{"version":2,"pool":"d","members":"x"}`} {
		if err := os.MkdirAll(PoolDir(root, pool), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(PoolFilePath(root, pool), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadPoolFile(root, pool)
		var d *quarantine.Damaged
		if !errors.As(err, &d) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("ReadPoolFile of torn %s = %v, want a quarantine.Damaged wrapping fs.ErrNotExist", pool, err)
		}
		if filepath.Dir(d.Moved) != filepath.Join(root, QuarantineDir) {
			t.Errorf("%s moved to %q, want under %s", pool, d.Moved, QuarantineDir)
		}
		if kept, err := os.ReadFile(d.Moved); err != nil || string(kept) != data {
			t.Errorf("%s: quarantined as %q, %v; want %q", d.Moved, kept, err, data)
		}
		// Moved once: the next read finds no file, and nothing to move.
		if _, err := ReadPoolFile(root, pool); !errors.Is(err, fs.ErrNotExist) || errors.As(err, &d) {
			t.Errorf("second ReadPoolFile of %s = %v, want a plain fs.ErrNotExist", pool, err)
		}
	}
	if n, err := quarantine.Count(filepath.Join(root, QuarantineDir)); n != 3 || err != nil {
		t.Errorf("quarantine holds %d files, %v; want 3", n, err)
	}
	if pf, err := ReadPoolFile(root, "b"); err != nil || pf.Pool != "b" {
		t.Errorf("ReadPoolFile of the good pool = %+v, %v", pf, err)
	}
	// The daemon writes it again: read as before.
	if err := WritePoolFile(root, "a", must(PoolFile{Pool: "a"}.Marshal())); err != nil {
		t.Fatal(err)
	}
	if pf, err := ReadPoolFile(root, "a"); err != nil || pf.Pool != "a" {
		t.Errorf("ReadPoolFile of the pool written again = %+v, %v", pf, err)
	}
	// A newer version is refused by name and stays.
	if err := os.WriteFile(PoolFilePath(root, "b"), []byte(`{"version":3,"pool":"b","members":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPoolFile(root, "b"); !errors.Is(err, contractver.ErrNewer) || errors.Is(err, quarantine.ErrDamaged) {
		t.Errorf("ReadPoolFile of a newer file = %v, want contractver.ErrNewer", err)
	}
	if _, err := os.Stat(PoolFilePath(root, "b")); err != nil {
		t.Errorf("the newer pool file was moved: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
