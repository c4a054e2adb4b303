package nodepools

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// TestTornMovedAside: a pools file that does not decode is moved beside
// it into _quarantine/ with its bytes and is missing from then on
// (fs.ErrNotExist: the CNI's missing-file rule applies); a newer one is
// refused in place.
func TestTornMovedAside(t *testing.T) {
	for _, data := range []string{`{"version":1,"pools":[{"na`, "", "\x00garbage", `{"version":1,"pools":{}}`} {
		path := Path(t.TempDir())
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(path)
		var d *quarantine.Damaged
		if !errors.As(err, &d) || !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Read of %q = %v, want a quarantine.Damaged wrapping fs.ErrNotExist", data, err)
		}
		if filepath.Dir(d.Moved) != filepath.Join(filepath.Dir(path), QuarantineDir) {
			t.Errorf("moved to %q, want under %s", d.Moved, QuarantineDir)
		}
		if kept, err := os.ReadFile(d.Moved); err != nil || string(kept) != data {
			t.Errorf("%s: quarantined as %q, %v; want %q", d.Moved, kept, err, data)
		}
		if _, err := Read(path); !errors.Is(err, fs.ErrNotExist) || errors.As(err, &d) {
			t.Errorf("second Read = %v, want a plain fs.ErrNotExist", err)
		}
	}
	path := Path(t.TempDir())
	if err := os.WriteFile(path, []byte(`{"version":2,"pools":{"new":true}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); !errors.Is(err, contractver.ErrNewer) || errors.Is(err, quarantine.ErrDamaged) {
		t.Errorf("Read of a newer file = %v, want contractver.ErrNewer", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the newer pools file was moved: %v", err)
	}
}
