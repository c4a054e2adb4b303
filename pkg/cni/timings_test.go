package cni

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

func TestTimingsOffByDefault(t *testing.T) {
	t.Setenv(TimingsEnv, "")
	StartTimings()
	if phases != nil {
		t.Fatal("timings on without " + TimingsEnv)
	}
	mark("x")           // a nil check
	writeTimings("ADD") // nothing
}

func TestTimingsLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "phases")
	t.Setenv(TimingsEnv, path)
	t0 := time.Now().Add(-1500 * time.Millisecond)
	t.Setenv(TimingsT0, fmt.Sprintf("%d.%06d", t0.Unix(), t0.Nanosecond()/1000))
	StartTimings()
	defer func() { phases = nil }()
	mark("parse")
	mark("move")
	writeTimings("ADD")
	writeTimings("DEL") // appends
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line := `(ADD|DEL) start=1[5-9][0-9][0-9]\.[0-9]{3} parse=[0-9.]+ move=[0-9.]+\n`
	if !regexp.MustCompile(`^` + line + line + `$`).Match(b) {
		t.Errorf("timings file:\n%s", b)
	}
}

func TestParseEpoch(t *testing.T) {
	for in, want := range map[string]int64{"12.5": 12_500_000_000, "12": 12_000_000_000, "12.000001": 12_000_001_000} {
		got, ok := parseEpoch(in)
		if !ok || got.UnixNano() != want {
			t.Errorf("parseEpoch(%q) = %v, %v; want %d", in, got.UnixNano(), ok, want)
		}
	}
	for _, in := range []string{"", "x", "1.x"} {
		if _, ok := parseEpoch(in); ok {
			t.Errorf("parseEpoch(%q) ok", in)
		}
	}
}
