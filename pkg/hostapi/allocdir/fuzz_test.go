package allocdir

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// FuzzReadPoolFile: a pool.json of any content reads, is torn (moved
// aside with its bytes) or fails in place, never panics; one that reads names its pool and, marshalled and written back,
// reads the same.
func FuzzReadPoolFile(f *testing.F) {
	if seed, err := os.ReadFile("testdata/pool-v1.json"); err == nil {
		f.Add(seed)
	}
	if seed, err := (PoolFile{Pool: "p", Resource: "r/p", Binding: "gpuAligned", Members: []string{"a"}, NoNCCL: true}).Marshal(); err == nil {
		f.Add(seed)
	}
	f.Add([]byte(`{"version":3,"pool":"p"}`))
	f.Add([]byte(`{"pool":"q"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		writeUnsynced(t, root, data)
		p, err := ReadPoolFile(root, "p")
		var d *quarantine.Damaged
		if errors.As(err, &d) {
			if got, rerr := os.ReadFile(d.Moved); rerr != nil || !bytes.Equal(got, data) || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a torn pool file is not in quarantine with its bytes: %+v: %v", d, rerr)
			}
			return
		}
		if err != nil {
			if _, serr := os.Stat(PoolFilePath(root, "p")); serr != nil {
				t.Fatalf("a pool file that failed otherwise than torn (%v) was moved: %v", err, serr)
			}
			return
		}
		if p.Pool != "p" {
			t.Fatalf("ReadPoolFile returned pool %q without an error", p.Pool)
		}
		b, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a pool file read: %v", err)
		}
		root2 := t.TempDir()
		writeUnsynced(t, root2, b)
		again, err := ReadPoolFile(root2, "p")
		if err != nil {
			t.Fatalf("ReadPoolFile of the file written back: %v\n%s", err, b)
		}
		if diff := cmp.Diff(p, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("pool file written back reads differently (-read +reread):\n%s", diff)
		}
	})
}

// writeUnsynced writes pool p's file as WritePoolFile does, without its
// fsync (which makes a fuzz run a few execs a second on a busy disk).
func writeUnsynced(t *testing.T, root string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(PoolDir(root, "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(PoolFilePath(root, "p"), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
