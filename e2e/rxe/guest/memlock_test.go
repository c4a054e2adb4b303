//go:build rxe_guest

package guest

// The memlock test: a non-root process registering 64 MiB on soft-RoCE fails at containerd's
// default RLIMIT_MEMLOCK (8 MiB) and works with the limit the daemon's NRI plugin decides.
// No container runtime runs in the guest: the process is started as runc starts a container's
// process after the NRI adjustment, by this test binary re-executed as root in the pod's
// netns: it sets RLIMIT_MEMLOCK (soft = hard, what the adjustment carries), drops to uid/gid
// 1000 with no supplementary groups and no capabilities (so no CAP_IPC_LOCK), then execs the
// verbs program.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/nri"
)

const (
	envMemlockExec  = "KUBE_RDMA_MEMLOCK_EXEC" // the limit (bytes) to start the program with
	memlockUser     = 1000                     // the container's runAsUser and runAsGroup
	containerdLimit = 8 << 20                  // containerd's default RLIMIT_MEMLOCK
	registerBytes   = 64 << 20                 // what the program registers
	poolLimit       = "128Mi"                  // the pool's memlock in the test's config
	memlockPort     = 18900                    // ibv_rc_pingpong's TCP port
	memlockTimeout  = 3 * time.Minute          // 64 MiB each way on TCG soft-RoCE
	memlockFailText = "Couldn't register MR"   // ibv_rc_pingpong when ibv_reg_mr fails
)

// In the re-executed binary: set the limit, become uid/gid 1000, exec the program (os.Args[1:]).
// Runs before the test framework parses flags, so it never returns into it.
func init() {
	v := os.Getenv(envMemlockExec)
	if v == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintf(os.Stderr, "memlock exec helper: %v\n", err)
		os.Exit(125)
	}
	limit, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		fail(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		fail(fmt.Errorf("setrlimit MEMLOCK %d: %w", limit, err))
	}
	if err := syscall.Setgroups(nil); err != nil {
		fail(err)
	}
	if err := syscall.Setgid(memlockUser); err != nil {
		fail(err)
	}
	if err := syscall.Setuid(memlockUser); err != nil { // drops every capability
		fail(err)
	}
	if len(os.Args) < 2 {
		fail(fmt.Errorf("no program to exec"))
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := syscall.Exec(os.Args[1], os.Args[1:], env); err != nil {
		fail(fmt.Errorf("exec %s: %w", os.Args[1], err))
	}
}

// memlockDecision runs the daemon's NRI decision on a CreateContainer request for a
// container that got the rxe device's uverbs node, with the pool limit poolMemlock ("" for
// the default), and returns the RLIMIT_MEMLOCK of the adjustment it makes.
func memlockDecision(t *testing.T, uverbs, poolMemlock string) uint64 {
	t.Helper()
	limit := config.MemlockUnlimited
	if poolMemlock != "" {
		var err error
		if limit, err = config.ParseMemlock(poolMemlock); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(uverbs, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
	devs := nri.Devices{Pools: []nri.Pool{{Name: "rxe", Limit: limit,
		Nodes: []nri.DeviceNode{{Path: uverbs, Major: major, Minor: minor}}}}}
	pod := nri.Pod{ID: "sandbox", Name: "memlock", Namespace: "default"}
	ctr := nri.Container{Name: "main", Devices: []nri.Device{
		{Path: "/dev/infiniband/rdma_cm", Type: "c", Major: 10, Minor: 58},
		{Path: uverbs, Type: "c", Major: major, Minor: minor},
	}}
	d := nri.Decide(pod, ctr, devs)
	rl := d.Rlimits()
	if rl == nil {
		t.Fatalf("the NRI decision leaves a container with %s alone: %+v", uverbs, d)
	}
	for _, r := range rl {
		if r.Type == nri.RlimitMemlock {
			if r.Soft != r.Hard {
				t.Fatalf("adjustment %s soft %d hard %d, want them equal", r.Type, r.Soft, r.Hard)
			}
			return r.Hard
		}
	}
	t.Fatalf("rlimits %+v have no %s", rl, nri.RlimitMemlock)
	return 0
}

// memlockCommand is the program and args started in ns as a container process with limit.
func memlockCommand(ctx context.Context, t *testing.T, ns string, limit uint64, name string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, tool(t, "ip"), append([]string{"netns", "exec", ns, self, tool(t, name)}, args...)...)
	cmd.Env = append(os.Environ(), envMemlockExec+"="+strconv.FormatUint(limit, 10))
	return cmd
}

// TestMemlockNonRoot: uid 1000 registering 64 MiB (ibv_rc_pingpong -s 64Mi) fails at 8 MiB
// with ibv_reg_mr's error and, with the limit the NRI decision gives (a pool with memlock
// 128Mi; the default, unlimited, is checked too), registers it and moves a message each way.
func TestMemlockNonRoot(t *testing.T) {
	requireGuest(t)
	a, b := rxePair(t, "ml", "192.0.2", false)
	uverbs := uverbsOf(t, a.RXE)
	if !strings.HasPrefix(uverbs, "/dev/infiniband/uverbs") {
		t.Fatalf("uverbs node of %s: %s", a.RXE, uverbs)
	}
	// A container's device cgroup lets it open its nodes; here the node's mode must let uid
	// 1000 open it (ib_uverbs creates them 0666).
	for _, p := range []string{uverbs, uverbsOf(t, b.RXE), "/dev/infiniband/rdma_cm"} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
			t.Fatalf("%s: %v, mode %v: uid %d could not open it", p, err, fi.Mode(), memlockUser)
		}
	}
	if got := memlockDecision(t, uverbs, ""); got != config.MemlockUnlimited {
		t.Errorf("default pool: the NRI decision gives %d, want unlimited", got)
	}
	adjusted := memlockDecision(t, uverbs, poolLimit)
	if adjusted < registerBytes+(1<<20) {
		t.Fatalf("the NRI decision gives %d for a pool of %s: below what the test registers", adjusted, poolLimit)
	}
	size := strconv.Itoa(registerBytes)
	common := []string{"-p", strconv.Itoa(memlockPort), "-s", size, "-n", "1", "-c"}
	server := func(limit uint64) *exec.Cmd {
		ctx, cancel := context.WithTimeout(context.Background(), memlockTimeout)
		t.Cleanup(cancel)
		return memlockCommand(ctx, t, a.NS, limit, "ibv_rc_pingpong", append([]string{"-d", a.RXE, "-g", strconv.Itoa(a.GID)}, common...)...)
	}

	// At containerd's default the server fails before it listens: ibv_reg_mr of 64 MiB.
	out, err := server(containerdLimit).CombinedOutput()
	if err == nil || !strings.Contains(string(out), memlockFailText) {
		t.Fatalf("uid %d at RLIMIT_MEMLOCK %d: err %v, want %q:\n%s", memlockUser, containerdLimit, err, memlockFailText, out)
	}
	t.Logf("uid %d, RLIMIT_MEMLOCK 8 MiB: %v: %s", memlockUser, err, lastLine(string(out)))

	// With the adjusted limit: both sides register 64 MiB and exchange a message.
	srv := server(adjusted)
	var sbuf strings.Builder
	srv.Stdout, srv.Stderr = &sbuf, &sbuf
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	ready := tcpListening(memlockPort)
	waitFor(t, 60*time.Second, "ibv_rc_pingpong server listening", func() (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("server exited: %v:\n%s", err, sbuf.String())
		default:
		}
		return ready(srv.Process.Pid)
	})
	ctx, cancel := context.WithTimeout(context.Background(), memlockTimeout)
	defer cancel()
	cli := memlockCommand(ctx, t, b.NS, adjusted, "ibv_rc_pingpong",
		append(append([]string{"-d", b.RXE, "-g", strconv.Itoa(b.GID)}, common...), a.IP.String())...)
	cout, cerr := cli.CombinedOutput()
	serr := <-done
	if cerr != nil || serr != nil || !strings.Contains(string(cout), "iters in") {
		t.Fatalf("uid %d at RLIMIT_MEMLOCK %d: client %v, server %v\nclient:\n%s\nserver:\n%s", memlockUser, adjusted, cerr, serr, cout, sbuf.String())
	}
	t.Logf("uid %d, RLIMIT_MEMLOCK %d (pool memlock %s, from the NRI decision): %s", memlockUser, adjusted, poolLimit, lastLine(string(cout)))
}
