package netnstest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// envChild marks the re-run of a test binary inside a user namespace.
const envChild = "KUBE_RDMA_NETNSTEST_USERNS"

// RequireNetAdmin makes sure the rest of the test may create network and
// mount namespaces and move links between them.
//
// As root it returns. As another user it re-runs this one test in a child
// process of the test binary placed in new user, network and mount
// namespaces, where the user is mapped to root (as dranet's tests do), and
// ends the test here with the child's result: a failure fails with the
// child's output; a pass is reported as a skip that says it passed in a
// user namespace, since the parent cannot go on with the test body. In the
// child it returns. Where the kernel does not allow unprivileged user
// namespaces it skips and says why.
//
// A test that needs what only the host's root may do (write sysfs, load
// modules) calls RequireHostRoot instead.
func RequireNetAdmin(t testing.TB) {
	t.Helper()
	if os.Getenv(envChild) == "1" {
		enterChild(t)
		return
	}
	if os.Geteuid() == 0 {
		return
	}
	tt, ok := t.(*testing.T)
	if !ok {
		t.Skip("needs root to create network namespaces (benchmarks are not re-run in a user namespace)")
	}
	rerun(tt)
}

// RequireRoot is RequireNetAdmin, the name older tests call.
func RequireRoot(t testing.TB) {
	t.Helper()
	RequireNetAdmin(t)
}

// RequireHostRoot skips the test unless it runs as root in the host's user
// namespace, for the few things a user namespace cannot do. why says what
// the test needs.
func RequireHostRoot(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(envChild) == "1" || os.Geteuid() != 0 {
		t.Skipf("needs root on the host (CI runs as root): %s", why)
	}
}

var (
	childOnce sync.Once
	childErr  error
)

// enterChild prepares the child once: its mounts become private, so the
// namespaces it bind-mounts never propagate to the host (they would not
// anyway from a less privileged user namespace; this makes it explicit).
func enterChild(t testing.TB) {
	t.Helper()
	childOnce.Do(func() {
		if os.Geteuid() != 0 {
			childErr = fmt.Errorf("uid %d in the user namespace, want 0", os.Geteuid())
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			childErr = fmt.Errorf("make mounts private: %w", err)
		}
	})
	if childErr != nil {
		t.Skipf("this kernel gives a user namespace too little to create network namespaces: %v", childErr)
	}
}

// rerun runs t alone in a child test binary in new user, network and mount
// namespaces, then ends t with the child's result.
func rerun(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.v=true", "-test.count=1"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	if dl, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(dl).Round(time.Second).String())
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envChild+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// Killed with the thread that started it, if the test binary dies.
		Pdeathsig: syscall.SIGKILL,
	}
	runtime.LockOSThread()
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		t.Skipf("needs root, or unprivileged user namespaces to run as root in one (CI runs as root): %v", err)
	}
	err = cmd.Wait()
	runtime.UnlockOSThread()
	name := t.Name()
	switch {
	case err != nil:
		t.Fatalf("re-run as root in a user namespace: %v\n%s", err, out.String())
	case strings.Contains(out.String(), "--- SKIP: "+name+" ("):
		t.Skipf("skipped in a user namespace:\n%s", out.String())
	case !strings.Contains(out.String(), "--- PASS: "+name+" ("):
		t.Fatalf("the re-run in a user namespace did not run %s:\n%s", name, out.String())
	}
	if testing.Verbose() {
		t.Logf("output of the re-run:\n%s", out.String())
	}
	// hack/testsummary counts a skip that starts so as a pass.
	t.Skipf("passed as root in a user namespace (uid %d mapped to 0, with its own network and mount namespaces)", os.Getuid())
}

// runPattern is a -test.run pattern that matches the test named name and
// no other: each level of the name anchored and quoted.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
