package nodepools

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/quarantine"
)

// FuzzRead: a pools file of any content reads, is torn (moved aside with
// its bytes) or fails in place, never panics; one
// that reads names every pool and, marshalled and written back, reads the
// same (its pools and devices sorted, as the daemon writes them).
func FuzzRead(f *testing.F) {
	if seed, err := os.ReadFile("testdata/pools-v1.json"); err == nil {
		f.Add(seed)
	}
	f.Add([]byte(`{"version":2,"pools":[]}`))
	f.Add([]byte(`{"pools":[{"name":"p","devices":[{"rdma":"a"}]}]}`))
	f.Add([]byte(`{"version":1,"pools":[{"name":"b","devices":[{"rdma":"z"},{"rdma":"a","pciAddress":"x"}]},{"name":"a"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := Path(t.TempDir())
		if err := os.WriteFile(path, data, 0o644); err != nil { // Write's fsyncs make a fuzz run crawl
			t.Fatal(err)
		}
		p, err := Read(path)
		var d *quarantine.Damaged
		if errors.As(err, &d) {
			if got, rerr := os.ReadFile(d.Moved); rerr != nil || !bytes.Equal(got, data) || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("a torn pools file is not in quarantine with its bytes: %+v: %v", d, rerr)
			}
			return
		}
		if err != nil {
			if _, serr := os.Stat(path); serr != nil {
				t.Fatalf("a pools file that failed otherwise than torn (%v) was moved: %v", err, serr)
			}
			return
		}
		for _, pool := range p.Pools {
			if pool.Name == "" {
				t.Fatalf("Read returned a pool without a name and no error")
			}
		}
		b, err := p.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a pools file read: %v", err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := Read(path)
		if err != nil {
			t.Fatalf("Read of the file written back: %v\n%s", err, b)
		}
		b2, err := again.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(b), string(b2)); diff != "" {
			t.Errorf("pools file written back marshals differently (-first +second):\n%s", diff)
		}
		for _, pool := range p.Pools {
			for _, d := range pool.Devices {
				if _, ok := again.PoolOf(d.RDMA, d.PCIAddress); !ok && (d.RDMA != "" || d.PCIAddress != "") {
					t.Errorf("device %+v of pool %s is in no pool after writing back", d, pool.Name)
				}
			}
		}
	})
}
