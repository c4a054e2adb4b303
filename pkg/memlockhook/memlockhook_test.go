package memlockhook

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// child starts a process whose RLIMIT_MEMLOCK the test sets: a stand-in for
// the container's first process, which the runtime has created and not yet
// let run.
func child(t *testing.T, lim unix.Rlimit) int {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_MEMLOCK, &lim, nil); err != nil {
		t.Fatalf("set the child's limit to %+v: %v", lim, err)
	}
	return cmd.Process.Pid
}

func limitOf(t *testing.T, pid int) unix.Rlimit {
	t.Helper()
	var l unix.Rlimit
	if err := unix.Prlimit(pid, unix.RLIMIT_MEMLOCK, nil, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// canRaiseHard: CAP_SYS_RESOURCE in the effective set (bit 24).
func canRaiseHard(t *testing.T) bool {
	t.Helper()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	return data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0
}

// TestRunRaisesSoftLimit: the hook raises the soft limit up to the hard
// one without any privilege, leaves a higher limit alone, and reads the pid
// from the OCI state.
func TestRunRaisesSoftLimit(t *testing.T) {
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &own); err != nil {
		t.Fatal(err)
	}
	if own.Max < 2<<20 {
		t.Skipf("this process's hard RLIMIT_MEMLOCK is %d: too low to test under", own.Max)
	}
	hard := own.Max
	pid := child(t, unix.Rlimit{Cur: 1 << 20, Max: hard})
	c, err := Run(strings.NewReader(`{"ociVersion":"1.2.0","id":"c1","status":"creating","pid":`+strconv.Itoa(pid)+`,"bundle":"/b"}`), hard)
	if err != nil {
		t.Fatal(err)
	}
	want := unix.Rlimit{Cur: hard, Max: hard}
	if diff := cmp.Diff(want, limitOf(t, pid)); diff != "" {
		t.Errorf("the child's limit (-want +got):\n%s", diff)
	}
	if c.Before.Cur != 1<<20 || c.Now != want {
		t.Errorf("change %+v: want from 1 MiB to %+v", c, want)
	}
	// A limit lower than what the process has takes nothing away.
	if _, err := Raise(pid, 1<<20); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, limitOf(t, pid)); diff != "" {
		t.Errorf("after a lower limit (-want +got):\n%s", diff)
	}
}

// TestRaiseHardLimit: past the hard limit the hook needs CAP_SYS_RESOURCE
// (runtimes run hooks as root); without it the error says so, and the
// process keeps what it had.
func TestRaiseHardLimit(t *testing.T) {
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &own); err != nil {
		t.Fatal(err)
	}
	if own.Max == Unlimited {
		t.Skip("this process's hard RLIMIT_MEMLOCK is already unlimited")
	}
	start := unix.Rlimit{Cur: min(own.Max, 1<<20), Max: own.Max}
	pid := child(t, start)
	_, err := Raise(pid, Unlimited)
	if canRaiseHard(t) {
		if err != nil {
			t.Fatal(err)
		}
		if got := limitOf(t, pid); got != (unix.Rlimit{Cur: Unlimited, Max: Unlimited}) {
			t.Errorf("limit %+v, want unlimited", got)
		}
		return
	}
	t.Logf("no CAP_SYS_RESOURCE here: checking the refusal; the raise itself runs where the capability is (the rxe-cluster e2e's runtime)")
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Errorf("err %v: want EPERM naming CAP_SYS_RESOURCE", err)
	}
	if got := limitOf(t, pid); got != start {
		t.Errorf("limit %+v after a refused raise, want %+v", got, start)
	}
}

func TestRunBadState(t *testing.T) {
	for _, in := range []string{"", "{", `{"pid":0}`, `{"id":"c1"}`, `{"pid":-4}`} {
		if _, err := Run(strings.NewReader(in), Unlimited); err == nil {
			t.Errorf("state %q: no error", in)
		}
	}
	// A process that is gone: ESRCH, said.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Raise(cmd.Process.Pid, Unlimited); !errors.Is(err, unix.ESRCH) {
		t.Errorf("raise for an exited pid: %v, want ESRCH", err)
	}
}

func TestLimitText(t *testing.T) {
	for _, v := range []uint64{1, 64 << 30, Unlimited} {
		got, err := ParseLimit(FormatLimit(v))
		if err != nil || got != v {
			t.Errorf("ParseLimit(FormatLimit(%d)) = %d, %v", v, got, err)
		}
	}
	for _, bad := range []string{"", "0", "-1", "64Gi", "infinity", "18446744073709551616"} {
		if _, err := ParseLimit(bad); err == nil {
			t.Errorf("ParseLimit(%q): no error", bad)
		}
	}
	h := CDIHook("/var/lib/kube-rdma/hooks/kube-rdma-hook-0123", 64<<30)
	want := []string{"kube-rdma-hook-0123", Command, "--limit", "68719476736"}
	if h.HookName != "createRuntime" || h.Path != "/var/lib/kube-rdma/hooks/kube-rdma-hook-0123" || !cmp.Equal(h.Args, want) {
		t.Errorf("hook %+v: want createRuntime, the path and args %q", h, want)
	}
}

// TestInstallAndRemoveUnused: the binary lands under a name of its content,
// a second install of the same content writes nothing, another content gets
// another name, and RemoveUnused keeps what a spec names and nothing else.
func TestInstallAndRemoveUnused(t *testing.T) {
	dir, cdi, src := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "kube-rdma")
	write := func(p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(src, "#!/bin/sh\necho one\n")
	one, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(one); err != nil || fi.Mode().Perm() != 0o755 || filepath.Dir(one) != dir {
		t.Fatalf("installed %s: %v %v", one, fi, err)
	}
	fi1, _ := os.Stat(one)
	again, err := Install(src, dir)
	if err != nil || again != one {
		t.Fatalf("second install: %s, %v; want %s", again, err, one)
	}
	if fi2, _ := os.Stat(one); !os.SameFile(fi1, fi2) {
		t.Errorf("the same content was written again")
	}
	write(src, "#!/bin/sh\necho two\n")
	two, err := Install(src, dir)
	if err != nil || two == one {
		t.Fatalf("install of new content: %s, %v (first %s)", two, err, one)
	}
	if b, _ := os.ReadFile(two); string(b) != "#!/bin/sh\necho two\n" {
		t.Errorf("installed content %q", b)
	}
	write(filepath.Join(cdi, "kube-rdma-hca.json"), `{"containerEdits":{"hooks":[{"hookName":"createRuntime","path":"`+two+`"}]}}`)
	if err := RemoveUnused(dir, cdi); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(one); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s, named by no spec, is still there (%v)", one, err)
	}
	if _, err := os.Stat(two); err != nil {
		t.Errorf("%s, named by a spec, is gone: %v", two, err)
	}
	if err := os.Remove(filepath.Join(cdi, "kube-rdma-hca.json")); err != nil {
		t.Fatal(err)
	}
	if err := RemoveUnused(dir, cdi); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left %v with no spec", left)
	}
	if _, err := Install(filepath.Join(t.TempDir(), "missing"), dir); err == nil {
		t.Error("install of a missing binary: no error")
	}
}
