package cniops

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
)

var golden = []Record{
	{Command: "ADD", Pool: "gpu-nics", Code: 0, Duration: 41250 * time.Microsecond},
	{Command: "DEL", Pool: "gpu-nics", Code: 11, Duration: 5001 * time.Millisecond},
	{Command: "CHECK", Pool: "", Code: 102, Duration: 900 * time.Microsecond},
}

// drainAll drains twice (a file is read one call after it is taken) and
// returns what both calls read.
func drainAll(t *testing.T, dir string) ([]Record, Stats) {
	t.Helper()
	return drainTwice(t, dir, Drain)
}

// drainTwice calls drain twice and returns what both calls handed on and
// counted.
func drainTwice[T any](t *testing.T, dir string, drain func(string, func(T)) (Stats, error)) ([]T, Stats) {
	t.Helper()
	var got []T
	var st Stats
	for range 2 {
		s, err := drain(dir, func(r T) { got = append(got, r) })
		if err != nil {
			t.Fatal(err)
		}
		st.Malformed += s.Malformed
		st.Newer += s.Newer
		if s.NewerErr != nil {
			st.NewerErr = s.NewerErr
		}
	}
	return got, st
}

// TestGoldenV1: testdata/ops-v1.jsonl (version 1, the first) reads as
// written, and Marshal writes the same bytes: the next version's reader
// keeps this file as its previous version's golden.
func TestGoldenV1(t *testing.T) {
	b, err := os.ReadFile("testdata/ops-v1.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, st := drainAll(t, dir)
	if diff := cmp.Diff(golden, got); diff != "" {
		t.Errorf("Drain (-want +got)\n%s", diff)
	}
	if st != (Stats{}) {
		t.Errorf("stats %+v, want none", st)
	}
	var out []byte
	for _, r := range golden {
		out = append(out, r.Marshal()...)
	}
	if diff := cmp.Diff(string(b), string(out)); diff != "" {
		t.Errorf("Marshal (-golden +got)\n%s", diff)
	}
}

// TestAppendDrain: records appended before and after a Drain all reach the
// reader exactly once, the spool ends empty, and the directory is created.
func TestAppendDrain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	var got []Record
	drain := func() {
		if _, err := Drain(dir, func(r Record) { got = append(got, r) }); err != nil {
			t.Fatal(err)
		}
	}
	drain() // no dir yet: nothing, no error
	var want []Record
	for i := range 5 {
		r := Record{Command: "ADD", Pool: "p", Code: uint(i), Duration: time.Duration(i) * time.Millisecond}
		if err := Append(dir, r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
		if i == 2 {
			drain()
		}
	}
	drain()
	drain()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got)\n%s", diff)
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 0 {
		t.Errorf("spool after draining: %v, %v; want empty", ents, err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("spool dir: %v, %v; want mode 0700", fi, err)
	}
}

// TestBounded: with no one draining, the spool stays under 2*MaxBytes and
// keeps the newest records.
func TestBounded(t *testing.T) {
	dir := t.TempDir()
	r := Record{Command: "DEL", Pool: strings.Repeat("x", 80), Code: 999, Duration: time.Hour}
	n := 3 * MaxBytes / len(r.Marshal())
	for i := range n {
		r.Code = uint(i)
		if err := Append(dir, r); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
	}
	if total > 2*MaxBytes+MaxLine {
		t.Errorf("spool holds %d bytes after %d appends; want at most %d", total, n, 2*MaxBytes+MaxLine)
	}
	got, _ := drainAll(t, dir)
	if len(got) == 0 || got[len(got)-1].Code != uint(n-1) {
		t.Errorf("drained %d records; want the newest (%d) last", len(got), n-1)
	}
	if len(r.Marshal()) > MaxLine {
		t.Errorf("line of %d bytes, over MaxLine", len(r.Marshal()))
	}
}

// TestTornAndNewer: a torn line costs itself and the record glued to it;
// a newer version is counted with an error that names it; the rest read.
func TestTornAndNewer(t *testing.T) {
	dir := t.TempDir()
	good := string(golden[0].Marshal())
	data := good + `{"v":1,"cmd":"DE` + good + `{"v":2,"cmd":"ADD","pool":"p","code":0,"us":1,"new":true}` + "\n" +
		`{"v":1,"cmd":"RUN","pool":"p","code":0,"us":1}` + "\n\n" + good + `{"v":1,"cmd":"ADD"`
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	got, st := drainAll(t, dir)
	if diff := cmp.Diff([]Record{golden[0], golden[0]}, got); diff != "" {
		t.Errorf("records (-want +got)\n%s", diff)
	}
	if st.Malformed != 3 || st.Newer != 1 {
		t.Errorf("stats %+v; want 3 malformed, 1 newer", st)
	}
	var ve *contractver.VersionError
	if !errors.Is(st.NewerErr, contractver.ErrNewer) || !errors.As(st.NewerErr, &ve) || ve.Found != 2 {
		t.Errorf("newer error %v; want a VersionError of version 2", st.NewerErr)
	}
}

func TestMarshalSanitizes(t *testing.T) {
	r := Record{Command: "ADD", Pool: `a"b\c/` + strings.Repeat("z", 100), Code: 7, Duration: -time.Second}
	got, err := Parse("x", []byte(strings.TrimSuffix(string(r.Marshal()), "\n")))
	if err != nil {
		t.Fatal(err)
	}
	want := Record{Command: "ADD", Pool: ("a_b_c_" + strings.Repeat("z", 100))[:MaxPool], Code: 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

// BenchmarkAppend is the cost a CNI command pays for its record (compare
// make bench-cni's ADD+DEL pair).
func BenchmarkAppend(b *testing.B) {
	dir := b.TempDir()
	r := Record{Command: "ADD", Pool: "gpu-nics", Duration: 40 * time.Millisecond}
	for b.Loop() {
		if err := Append(dir, r); err != nil {
			b.Fatal(err)
		}
	}
}
