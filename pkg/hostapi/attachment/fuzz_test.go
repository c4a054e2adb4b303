package attachment

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// FuzzLoad: a record of any content loads, is torn (moved aside with its
// bytes, then none), or is of a version this binary does not read (left in
// place), never panics; one that loads is
// encoded as Save does and loads the same (ipamConf the same JSON value).
func FuzzLoad(f *testing.F) {
	if seed, err := os.ReadFile("testdata/attachment-v1.json"); err == nil {
		f.Add(seed)
	}
	f.Add([]byte(`{"schema":1,"containerID":"c","ifName":"net1","ipamConf":{"type":"host-local"},"release":{"tries":1,"since":"2026-01-02T03:04:05.678+01:00"}}`))
	f.Add([]byte(`{"schema":2}`))
	f.Add([]byte(`{"schema":1,"devices":null,"ipamConf":null}`))
	k := Key{ContainerID: "c", IfName: "net1"}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Store{Dir: t.TempDir()}
		name, _ := k.file()
		if err := os.WriteFile(filepath.Join(s.Dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := s.Load(k)
		if err != nil {
			var verr *contractver.VersionError
			var d *Damaged
			switch {
			case errors.As(err, &d) && errors.Is(err, ErrNotFound):
				if got, rerr := os.ReadFile(d.Moved); rerr != nil || !bytes.Equal(got, data) {
					t.Fatalf("a torn record is not in quarantine with its bytes: %+v: %v", d, rerr)
				}
			case errors.As(err, &verr):
				if _, serr := os.Stat(filepath.Join(s.Dir, name)); serr != nil {
					t.Fatalf("a record of another version was moved: %v", serr)
				}
			default:
				t.Fatalf("Load failed other than torn or by version: %v", err)
			}
			return
		}
		if a.Schema != Version && a.Schema != VersionMoved && a.Schema != 0 {
			t.Fatalf("Load returned a record of schema %d", a.Schema)
		}
		a.Key = k
		// Save's encoding, written without its fsync (which makes a fuzz
		// run a few execs a second on a busy disk).
		a.Schema = a.schema()
		enc, err := json.MarshalIndent(a, "", "  ")
		if err != nil {
			t.Fatalf("encode a record Load returned: %v", err)
		}
		if err := os.WriteFile(filepath.Join(s.Dir, name), enc, 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := s.Load(k)
		if err != nil {
			t.Fatalf("Load of the record saved back: %v", err)
		}
		if !equalJSONValue(a.IPAMConf, b.IPAMConf) {
			t.Errorf("ipamConf %s saved back reads %s", a.IPAMConf, b.IPAMConf)
		}
		a.IPAMConf, b.IPAMConf = nil, nil
		if diff := cmp.Diff(a, b, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("record saved back reads differently (-loaded +reloaded):\n%s", diff)
		}
	})
}

func equalJSONValue(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}
