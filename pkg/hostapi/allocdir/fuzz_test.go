package allocdir

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzReadPoolFile: a pool.json of any content reads or fails, never
// panics; one that reads names its pool and, marshalled and written back,
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
		if err != nil {
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
