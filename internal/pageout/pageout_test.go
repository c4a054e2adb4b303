package pageout_test

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/pageout"
)

// TestSegmentsAreMapped holds the address arithmetic to what the kernel
// says: every segment Segments returns lies inside a read-only mapping of the
// test binary in /proc/self/maps (read here only to check).
func TestSegmentsAreMapped(t *testing.T) {
	segs, err := pageout.Segments()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var execs int
	for _, s := range segs {
		if s.Exec {
			execs++
		}
		found := false
		for _, l := range strings.Split(string(maps), "\n") {
			f := strings.Fields(l)
			if len(f) < 6 || f[5] != exe || f[1][1] == 'w' {
				continue
			}
			lo, hi, _ := strings.Cut(f[0], "-")
			a, _ := strconv.ParseUint(lo, 16, 64)
			b, _ := strconv.ParseUint(hi, 16, 64)
			if uint64(s.Addr) >= a && uint64(s.Addr+s.Len) <= b {
				found = true
			}
		}
		if !found {
			t.Errorf("segment %#x+%d (exec %v) is in no read-only mapping of %s:\n%s", s.Addr, s.Len, s.Exec, exe, maps)
		}
	}
	if execs != 1 {
		t.Errorf("%d executable segments, want 1: %+v", execs, segs)
	}
}

// TestReleaseDropsFilePages checks the effect: the test binary's file-backed
// resident pages shrink after Release, and the process goes on running.
func TestReleaseDropsFilePages(t *testing.T) {
	before := rssFile(t)
	n, err := pageout.Release()
	if err != nil {
		t.Skipf("kernel refused MADV_PAGEOUT (before Linux 5.4?): %v", err)
	}
	after := rssFile(t)
	t.Logf("advised %d bytes; RssFile %d kB -> %d kB", n, before, after)
	if after >= before {
		t.Errorf("RssFile %d kB after Release, want below %d kB", after, before)
	}
}

func rssFile(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.Fields(v)[0])
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}
