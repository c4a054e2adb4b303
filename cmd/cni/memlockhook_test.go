package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMemlockHookCommand: the binary run as the runtime runs the hook (the
// OCI state on stdin) raises the process's soft limit to --limit (within the
// hard limit: no privilege needed), exits 0 and writes nothing; a bad
// command line exits 2, a state without a pid 1, each saying why.
func TestMemlockHookCommand(t *testing.T) {
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &own); err != nil {
		t.Fatal(err)
	}
	if own.Max < 4<<20 {
		t.Skipf("this process's hard RLIMIT_MEMLOCK %d is under 4 MiB", own.Max)
	}
	first := exec.Command("sleep", "60")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
	pid := first.Process.Pid
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 1 << 20, Max: own.Max}, nil); err != nil {
		t.Fatal(err)
	}
	state := `{"ociVersion":"1.2.0","id":"c","status":"creating","pid":` + strconv.Itoa(pid) + `,"bundle":"/b"}`
	out, errOut, code := runBinary(t, []string{"memlock-hook", "--limit", "4194304"}, nil, state)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("hook: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var got unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &got); err != nil {
		t.Fatal(err)
	}
	if got.Cur != 4<<20 || got.Max != own.Max {
		t.Errorf("limit after the hook %+v, want soft 4 MiB, hard %d", got, own.Max)
	}
	for _, tc := range []struct {
		args  []string
		stdin string
		code  int
		says  string
	}{
		{[]string{"memlock-hook"}, state, 2, "--limit is required"},
		{[]string{"memlock-hook", "--limit", "64Gi"}, state, 2, `want "unlimited" or a positive number of bytes`},
		{[]string{"memlock-hook", "--limit", "unlimited", "extra"}, state, 2, "takes no arguments"},
		{[]string{"memlock-hook", "--limit", "unlimited"}, `{"id":"c"}`, 1, "has no pid"},
	} {
		_, errOut, code := runBinary(t, tc.args, nil, tc.stdin)
		if code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d saying %q", tc.args, code, errOut, tc.code, tc.says)
		}
	}
}
