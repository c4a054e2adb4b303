//go:build rxe_guest

package guest

// Helpers for guest tests: commands in a network namespace with a timeout, netns/veth/rxe
// fixtures that clean up after themselves, RoCE v2 GID lookup through sysfs, and a
// server/client runner that polls for the server instead of sleeping.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	cmdTimeout    = 90 * time.Second // any single command
	pollEvery     = 50 * time.Millisecond
	sysInfiniBand = "/sys/class/infiniband"
)

// requireGuest skips the test outside the harness guest: these tests change the machine's
// network namespaces and RDMA devices.
func requireGuest(t *testing.T) {
	t.Helper()
	if os.Getenv("KUBE_RDMA_RXE_GUEST") != "1" {
		t.Skip("not inside the rxe e2e guest (KUBE_RDMA_RXE_GUEST!=1); run e2e/rxe/run.sh")
	}
}

// requireBinary returns the path in env var, or skips the test when it is unset or missing.
func requireBinary(t *testing.T, env, what string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Skipf("%s is unset: the harness found no %s to build", env, what)
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s=%s: %v", env, p, err)
	}
	return p
}

// tool returns the full path of a program from a Debian package, never a busybox applet
// (busybox's ip has no netns support).
func tool(t *testing.T, name string) string {
	t.Helper()
	for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Fatalf("%s: no such program in the guest (only a busybox applet, if any)", name)
	return ""
}

// nsCommand builds a command that runs name in network namespace ns ("" is the root netns).
func nsCommand(ctx context.Context, t *testing.T, ns, name string, args ...string) *exec.Cmd {
	t.Helper()
	if ns == "" {
		return exec.CommandContext(ctx, tool(t, name), args...)
	}
	return exec.CommandContext(ctx, tool(t, "ip"), append([]string{"netns", "exec", ns, tool(t, name)}, args...)...)
}

// run runs a command in ns with cmdTimeout and returns its combined output.
func run(t *testing.T, ns, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := nsCommand(ctx, t, ns, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s (netns %q): %w: %s", name, strings.Join(args, " "), ns, err, out)
	}
	return string(out), nil
}

func mustRun(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	out, err := run(t, ns, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// cleanupRun registers a command to run at cleanup; its failure is logged, not fatal.
func cleanupRun(t *testing.T, ns, name string, args ...string) {
	t.Helper()
	t.Cleanup(func() {
		if _, err := run(t, ns, name, args...); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
}

// waitFor polls cond until it returns true, an error, or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait for %s: still false after %s", what, timeout)
		}
		time.Sleep(pollEvery)
	}
}

// addNetns creates network namespace name, deleted at cleanup.
func addNetns(t *testing.T, name string) {
	t.Helper()
	mustRun(t, "", "ip", "netns", "add", name)
	cleanupRun(t, "", "ip", "netns", "del", name)
}

// endpoint is one end of a veth pair with an rxe device on it.
type endpoint struct {
	NS     string // "" is the root netns
	Netdev string
	RXE    string
	IP     net.IP
	GID    int // index of the RoCE v2 GID for IP
}

// rxePair builds two endpoints joined by a veth pair: a network namespace per end (or the
// root netns for end A when hostA is set), an address from subnet (a /24 prefix such as
// "192.0.2") on each end, and an rxe device created inside each end's netns.
// Names derive from tag, which must be short and unique in the test binary.
func rxePair(t *testing.T, tag, subnet string, hostA bool) (a, b endpoint) {
	t.Helper()
	a = endpoint{NS: tag + "A", Netdev: tag + "a", RXE: "rxe" + tag + "A", IP: net.ParseIP(subnet + ".1")}
	b = endpoint{NS: tag + "B", Netdev: tag + "b", RXE: "rxe" + tag + "B", IP: net.ParseIP(subnet + ".2")}
	if hostA {
		a.NS = ""
	}
	for _, e := range []endpoint{a, b} {
		if e.NS != "" {
			addNetns(t, e.NS)
		}
	}
	args := []string{"link", "add", "name", a.Netdev}
	if a.NS != "" {
		args = append(args, "netns", a.NS)
	}
	args = append(args, "type", "veth", "peer", "name", b.Netdev, "netns", b.NS)
	mustRun(t, "", "ip", args...)
	cleanupRun(t, a.NS, "ip", "link", "del", a.Netdev)
	for _, e := range []endpoint{a, b} {
		mustRun(t, e.NS, "ip", "addr", "add", e.IP.String()+"/24", "dev", e.Netdev)
		mustRun(t, e.NS, "ip", "link", "set", e.Netdev, "up")
		mustRun(t, e.NS, "ip", "link", "set", "lo", "up")
	}
	// Only now: an rxe port is ACTIVE once its netdev has carrier, i.e. both veth ends are up.
	for _, e := range []*endpoint{&a, &b} {
		addRXE(t, e.NS, e.RXE, e.Netdev)
		e.GID = roceV2GID(t, e.RXE, e.IP)
	}
	return a, b
}

// addRXE creates rxe device name on netdev inside ns, deleted at cleanup, and waits until its
// port is ACTIVE.
func addRXE(t *testing.T, ns, name, netdev string) {
	t.Helper()
	mustRun(t, ns, "rdma", "link", "add", name, "type", "rxe", "netdev", netdev)
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(sysInfiniBand, name)); err != nil {
			return // gone with its netdev
		}
		if _, err := run(t, "", "rdma", "link", "delete", name); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	state := filepath.Join(sysInfiniBand, name, "ports", "1", "state")
	waitFor(t, 30*time.Second, name+" port ACTIVE", func() (bool, error) {
		b, err := os.ReadFile(state)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return strings.Contains(string(b), "ACTIVE"), err
	})
}

// roceV2GID waits for dev's port 1 to list a RoCE v2 GID for ip and returns its index.
func roceV2GID(t *testing.T, dev string, ip net.IP) int {
	t.Helper()
	idx := -1
	waitFor(t, 30*time.Second, fmt.Sprintf("RoCE v2 GID %s on %s", ip, dev), func() (bool, error) {
		i, err := findRoceV2GID(dev, 1, ip)
		idx = i
		return err == nil, nil
	})
	return idx
}

var errNoGID = errors.New("no matching gid")

// findRoceV2GID scans ports/<port>/gid_attrs/types/* of dev for a "RoCE v2" entry whose GID
// is ip. Empty GID slots fail to read with EINVAL and are skipped.
func findRoceV2GID(dev string, port int, ip net.IP) (int, error) {
	base := filepath.Join(sysInfiniBand, dev, "ports", strconv.Itoa(port))
	entries, err := os.ReadDir(filepath.Join(base, "gid_attrs", "types"))
	if err != nil {
		return -1, fmt.Errorf("list gid types of %s: %w", dev, err)
	}
	for _, e := range entries {
		typ, err := os.ReadFile(filepath.Join(base, "gid_attrs", "types", e.Name()))
		if err != nil || strings.TrimSpace(string(typ)) != "RoCE v2" {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(base, "gids", e.Name()))
		if err != nil {
			continue
		}
		gid, err := parseGID(string(raw))
		if err != nil || !gid.Equal(ip) {
			continue
		}
		return strconv.Atoi(e.Name())
	}
	return -1, fmt.Errorf("%s port %d: %w for %s", dev, port, errNoGID, ip)
}

// proc is a program to run in a network namespace.
type proc struct {
	NS   string
	Name string
	Args []string
}

func (p proc) String() string {
	return fmt.Sprintf("[netns %q] %s %s", p.NS, p.Name, strings.Join(p.Args, " "))
}

// serverReady reports whether a started server is ready for its client.
type serverReady func(pid int) (bool, error)

// tcpListening is ready once the server's netns has a TCP listener on port. perftest and
// ibv_*_pingpong exchange queue pair data over TCP before any RDMA traffic.
func tcpListening(port int) serverReady {
	return func(pid int) (bool, error) {
		for _, f := range []string{"tcp", "tcp6"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
			if err != nil {
				continue
			}
			ports, err := parseListenPorts(string(b))
			if err != nil {
				return false, err
			}
			if ports[port] {
				return true, nil
			}
		}
		return false, nil
	}
}

// cmListening is ready once an RDMA CM id listens on port (rping has no TCP side).
func cmListening(t *testing.T, port int) serverReady {
	return cmListeningIn(t, "", port)
}

// cmListeningIn is cmListening asked in netns ns: in the exclusive RDMA netns mode only the
// netns of a device sees its resources.
func cmListeningIn(t *testing.T, ns string, port int) serverReady {
	return func(int) (bool, error) {
		out, err := run(t, ns, "rdma", "resource", "show", "cm_id")
		if err != nil {
			return false, nil
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "LISTEN") && strings.Contains(l, ":"+strconv.Itoa(port)) {
				return true, nil
			}
		}
		return false, nil
	}
}

// runServerClient starts server, polls ready until it accepts clients, runs client, and waits
// for the server to exit. A failed round is retried (up to attempts) with a fresh server.
func runServerClient(t *testing.T, server, client proc, ready serverReady, attempts int) (srvOut, cliOut string) {
	t.Helper()
	var lastErr error
	for i := 1; i <= attempts; i++ {
		s, c, err := serverClientOnce(t, server, client, ready)
		if err == nil {
			return s, c
		}
		lastErr = err
		t.Logf("attempt %d/%d: %v\nserver output:\n%s\nclient output:\n%s", i, attempts, err, s, c)
	}
	t.Fatalf("%s <- %s: %v", server, client, lastErr)
	return "", ""
}

func serverClientOnce(t *testing.T, server, client proc, ready serverReady) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	var sbuf bytes.Buffer
	srv := nsCommand(ctx, t, server.NS, server.Name, server.Args...)
	srv.Stdout, srv.Stderr = &sbuf, &sbuf
	if err := srv.Start(); err != nil {
		return "", "", fmt.Errorf("start server: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()

	// `ip netns exec` execs the server in place, so srv's pid is the server's.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			return sbuf.String(), "", fmt.Errorf("server exited before it was ready: %v", err)
		default:
		}
		ok, err := ready(srv.Process.Pid)
		if err != nil {
			cancel()
			<-done
			return sbuf.String(), "", fmt.Errorf("server readiness: %w", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			return sbuf.String(), "", errors.New("server not ready after 30s")
		}
		time.Sleep(pollEvery)
	}

	cout, cerr := nsCommand(ctx, t, client.NS, client.Name, client.Args...).CombinedOutput()
	if cerr != nil {
		cancel()
		<-done
		return sbuf.String(), string(cout), fmt.Errorf("client: %w", cerr)
	}
	if err := <-done; err != nil {
		return sbuf.String(), string(cout), fmt.Errorf("server: %w", err)
	}
	return sbuf.String(), string(cout), nil
}

// hostState is what the root netns looks like to a CNI plugin: links, addresses, routes,
// RDMA devices and links, and named network namespaces, less what changes by itself (see
// normalizeState). Compare before ADD and after DEL.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range [][]string{
		{"ip", "-o", "link", "show"},
		{"ip", "-o", "addr", "show"},
		{"ip", "route", "show", "table", "all"},
		{"rdma", "dev", "show"},
		{"rdma", "link", "show"},
		{"ip", "netns", "list"},
	} {
		fmt.Fprintf(&b, "$ %s\n%s\n", strings.Join(c, " "), normalizeState(c, mustRun(t, "", c[0], c[1:]...)))
	}
	return b.String()
}
