package cniops

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzDrain: a spool file of any content drains or fails, never panics; every
// record it yields marshals to a line that parses back to the same record,
// and the lines it counts plus the records it yields never exceed the lines
// in the file.
func FuzzDrain(f *testing.F) {
	if seed, err := os.ReadFile("testdata/ops-v1.jsonl"); err == nil {
		f.Add(seed)
	}
	f.Add([]byte(`{"v":2,"cmd":"ADD"}` + "\n"))
	f.Add([]byte(`{"v":1,"cmd":"DEL","pool":"p","code":0,"us":1}{"v":1` + "\n"))
	f.Add([]byte("\n\n{}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
			t.Fatal(err)
		}
		var got []Record
		var st Stats
		for range 2 {
			s, err := Drain(dir, func(r Record) { got = append(got, r) })
			if err != nil {
				t.Fatal(err)
			}
			st.Malformed += s.Malformed
			st.Newer += s.Newer
		}
		if lines := strings.Count(string(data), "\n") + 1; len(got)+st.Malformed+st.Newer > lines {
			t.Errorf("%d records, %d malformed, %d newer from %d lines", len(got), st.Malformed, st.Newer, lines)
		}
		for _, r := range got {
			line := r.Marshal()
			if len(line) > MaxLine+1 {
				t.Errorf("record %+v marshals to %d bytes", r, len(line))
			}
			back, err := Parse("fuzz", line[:len(line)-1])
			if err != nil {
				t.Fatalf("Parse of a marshalled record %q: %v", line, err)
			}
			if diff := cmp.Diff(r, back); diff != "" {
				t.Errorf("round trip (-read +again)\n%s", diff)
			}
		}
	})
}
