package claimrecord

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

// FuzzReadAll: a claim record of any content is read, quarantined, or
// (a version this binary does not read) fails the whole read, never
// panics; one that is read is written back and reads the same.
func FuzzReadAll(f *testing.F) {
	if seed, err := os.ReadFile("testdata/claim-v1.json"); err == nil {
		f.Add(seed)
	}
	f.Add([]byte(`{"version":2,"uid":"u","namespace":"ns","name":"c","devices":[{"request":"r","pool":"p","device":"d"}]}`))
	f.Add([]byte(`{"version":3}`))
	f.Add([]byte(`{"version":"2"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		name := filepath.Join(dir, "claim.json")
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
		recs, damaged, err := ReadAll(dir)
		if err != nil {
			if !errors.Is(err, contractver.ErrNewer) && !errors.Is(err, contractver.ErrOlder) {
				t.Fatalf("ReadAll failed other than by version: %v", err)
			}
			return
		}
		if len(recs)+len(damaged) != 1 {
			t.Fatalf("ReadAll of one file: %d records, %d damaged", len(recs), len(damaged))
		}
		if len(damaged) == 1 {
			if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a damaged record stays in place: %v", err)
			}
			if got, err := os.ReadFile(damaged[0].Moved); err != nil || filepath.Dir(damaged[0].Moved) != filepath.Join(dir, QuarantineDir) || !bytes.Equal(got, data) {
				t.Fatalf("a damaged record is not in quarantine with its bytes: %+v: %v", damaged[0], err)
			}
			return
		}
		rec := recs[0]
		if CheckUID(rec.UID) != nil {
			return // Write refuses it; nothing more to hold it to
		}
		// Write's encoding, written without its fsync (which makes a fuzz
		// run a few execs a second on a busy disk).
		enc, err := json.Marshal(file{Version: Version, Record: rec})
		if err != nil {
			t.Fatalf("encode a record ReadAll returned: %v", err)
		}
		dir2 := t.TempDir()
		if err := os.WriteFile(Path(dir2, rec.UID), enc, 0o600); err != nil {
			t.Fatal(err)
		}
		again, damaged, err := ReadAll(dir2)
		if err != nil || len(damaged) != 0 || len(again) != 1 {
			t.Fatalf("ReadAll of the record written back: %v, %v, %v", again, damaged, err)
		}
		if diff := cmp.Diff(rec, again[0], cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("record written back reads differently (-read +reread):\n%s", diff)
		}
	})
}
