package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// A run replaces its own label's figures for its N and keeps every other
// run's and N's.
func TestWriteResultsMergesRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scale.json")
	write := func(rs ...Result) {
		t.Helper()
		if err := writeResults(path, rs); err != nil {
			t.Fatal(err)
		}
	}
	write(Result{Run: "1", N: 1000, SetupS: 1}, Result{Run: "1", N: 5000, SetupS: 2})
	write(Result{Run: "2", N: 1000, SetupS: 3})
	write(Result{Run: "1", N: 5000, SetupS: 4})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		run string
		n   int
		s   float64
	}{{"1", 1000, 1}, {"2", 1000, 3}, {"1", 5000, 4}}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Run != w.run || got[i].N != w.n || got[i].SetupS != w.s {
			t.Errorf("result %d: run %q N %d setup %v, want %q %d %v", i, got[i].Run, got[i].N, got[i].SetupS, w.run, w.n, w.s)
		}
	}
}
