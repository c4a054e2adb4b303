package suite

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The rxe-cluster harness's parsers, on outputs as the tools print them; no cluster needed.

func TestParseRXECluster(t *testing.T) {
	good := map[string]string{"harness": "rxe-cluster", "image": "localhost/kube-rdma:e2e", "test-image": "localhost/rdma-test:e2e", "perf-image": "localhost/rdma-perf:e2e",
		"nodes": "rxec-1 rxec-2", "rdma-subnet-prefix": "10.78.0", "rdma-device": "rxe0", "api-server": "10.77.0.1:6443", "bw-seconds": "3", "rdma-netns-mode": "shared"}
	c, err := parseRXECluster(good)
	if err != nil {
		t.Fatal(err)
	}
	want := rxeClusterDesc{nodes: []string{"rxec-1", "rxec-2"}, imageRepo: "localhost/kube-rdma", imageTag: "e2e", perfImage: "localhost/rdma-perf:e2e",
		subnet: "10.78.0", device: "rxe0", apiHost: "10.77.0.1", apiPort: "6443", netnsMode: "shared", bwSeconds: 3}
	if diff := cmp.Diff(want, c, cmp.AllowUnexported(rxeClusterDesc{})); diff != "" {
		t.Errorf("parseRXECluster (-want +got):\n%s", diff)
	}
	for key, bad := range map[string]string{"nodes": "", "perf-image": "", "image": "localhost/kube-rdma", "rdma-subnet-prefix": "10.78.0.0/24",
		"rdma-device": "", "api-server": "10.77.0.1", "bw-seconds": "0", "rdma-netns-mode": ""} {
		d := map[string]string{}
		for k, v := range good {
			d[k] = v
		}
		d[key] = bad
		if _, err := parseRXECluster(d); err == nil {
			t.Errorf("%s %q: no error", key, bad)
		}
	}
}

func TestPerftestGbps(t *testing.T) {
	out := ` WARNING: BW peak won't be measured in this run.
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rxe0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      2210             0.00               0.14   		   0.000276
---------------------------------------------------------------------------------------
`
	got, writes, err := perftestGbps(out)
	if err != nil || got != 0.14 || writes != 2210 {
		t.Errorf("perftestGbps = %v, %d, %v; want 0.14, 2210", got, writes, err)
	}
	// A slow host: 0.00 Gb/sec, the writes went through.
	if got, writes, err := perftestGbps(" #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 65536 37 0.00 0.00 0.000007\n"); err != nil || got != 0 || writes != 37 {
		t.Errorf("slow link: %v, %d, %v; want 0, 37, no error", got, writes, err)
	}
	// No write completed: an error.
	if _, _, err := perftestGbps(" #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 65536 0 0.00 0.00 0.000000\n"); err == nil {
		t.Error("no writes: no error")
	}
	// MB/sec (no --report_gbits) is not a Gb/sec figure.
	if _, _, err := perftestGbps(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536 2210 0.00 17.5 0.000276\n"); err == nil {
		t.Error("MB/sec result: no error")
	}
	if _, _, err := perftestGbps("Couldn't connect to 10.77.0.11:18600\n"); err == nil {
		t.Error("no result line: no error")
	}
}

func TestInetAddr(t *testing.T) {
	out := `3: net1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc fq_codel qlen 1000
    inet 10.78.0.64/24 brd 10.78.0.255 scope global net1
       valid_lft forever preferred_lft forever
`
	if got, err := inetAddr(out); err != nil || got != "10.78.0.64" {
		t.Errorf("inetAddr = %q, %v; want 10.78.0.64", got, err)
	}
	if _, err := inetAddr("3: net1: <BROADCAST> mtu 1500\n"); err == nil {
		t.Error("no address: no error")
	}
}

func TestRpingCount(t *testing.T) {
	out := "ping data: rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\n" +
		"ping data: rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs\n" +
		"client DISCONNECT EVENT...\n"
	if got := rpingCount(out); got != 2 {
		t.Errorf("rpingCount = %d, want 2", got)
	}
}

func TestMedianWorst(t *testing.T) {
	for _, tc := range []struct {
		in            []time.Duration
		median, worst time.Duration
	}{
		{nil, 0, 0},
		{[]time.Duration{3 * time.Second}, 3 * time.Second, 3 * time.Second},
		{[]time.Duration{4 * time.Second, 2 * time.Second}, 3 * time.Second, 4 * time.Second},
		{[]time.Duration{5 * time.Second, 1 * time.Second, 2 * time.Second}, 2 * time.Second, 5 * time.Second},
	} {
		m, w := medianWorst(tc.in)
		if m != tc.median || w != tc.worst {
			t.Errorf("medianWorst(%v) = %v, %v; want %v, %v", tc.in, m, w, tc.median, tc.worst)
		}
	}
}

func TestNodesCell(t *testing.T) {
	out := `NODE    NETNS   POOLS (ALLOCATED/ALLOCATABLE/CAPACITY)  UNHEALTHY  LINK      DAEMON  UPDATED
rxec-1  shared  rxe 0/0/1                               rxe0       Ethernet  v0.1    1s ago
rxec-2  shared  rxe 0/1/1                               -          Ethernet  v0.1    2s ago
`
	for _, tc := range []struct {
		node, want string
		ok         bool
	}{{"rxec-1", "rxe0", true}, {"rxec-2", "-", true}, {"rxec-3", "", false}} {
		got, ok := nodesCell(out, tc.node, "UNHEALTHY")
		if got != tc.want || ok != tc.ok {
			t.Errorf("nodesCell(%s) = %q, %v; want %q, %v", tc.node, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDoctorVerdictOK(t *testing.T) {
	for _, tc := range []struct {
		check, got, mode string
		want             bool
	}{
		{"devices healthy", "PASS 1 of 1 healthy", "shared", true},
		{"GPU<->NIC PCIe level", "SKIP no GPU of the pod in the node's state", "exclusive", true},
		{"netns mode for pool rxe", "WARN exclusive pool, shared netns mode", "shared", true},
		{"netns mode for pool rxe", "WARN exclusive pool, shared netns mode", "exclusive", false},
		{"in container: ulimit -l (locked memory)", "WARN locked memory limited to 8192 KiB", "shared", false},
		{"in container: RoCE v2 GID", "FAIL the container does not see rxe0", "shared", false},
	} {
		if got := doctorVerdictOK(tc.check, tc.got, tc.mode); got != tc.want {
			t.Errorf("doctorVerdictOK(%q, %q, %s) = %v, want %v", tc.check, tc.got, tc.mode, got, tc.want)
		}
	}
}

func TestParsePortWait(t *testing.T) {
	w, err := parsePortWait("1.45 1795745394.454000 2026-11-27T02:09:54.754000123Z 0.10\n")
	if err != nil {
		t.Fatal(err)
	}
	if w.seen != 1450*time.Millisecond || w.daemon != 300000123*time.Nanosecond || w.linkSet != 100*time.Millisecond || w.own() != 200000123*time.Nanosecond {
		t.Errorf("seen %s daemon %s link set %s own %s, want 1.45s, 300.000123ms, 100ms, 200.000123ms", w.seen, w.daemon, w.linkSet, w.own())
	}
	// A daemon in another zone: the same instant.
	if w, err := parsePortWait("0.50 1795745394.454000 2026-11-27T03:09:54.554+01:00 0.00"); err != nil || w.daemon != 100*time.Millisecond {
		t.Errorf("offset zone: %+v %v, want daemon 100ms", w, err)
	}
	// A guest slower to return from ip than the daemon to find the change: its own part is 0.
	if w, err := parsePortWait("2.00 1795745394.454000 2026-11-27T02:09:54.554Z 1.50"); err != nil || w.own() != 0 {
		t.Errorf("slow ip: %+v %v, want own 0", w, err)
	}
	// healthSince is the start of the re-read that found the change: a periodic one that
	// started 45 ms before it is the change's; one a second before is not, nor one after
	// the poll saw it.
	for _, tc := range []struct {
		line string
		ok   bool
	}{{"5.93 1795745394.454000 2026-11-27T02:09:54.409Z 0.84", true}, {"0.20 1795745394.454000 2026-11-27T02:09:53.954Z 0.10", true},
		{"0.20 1795745394.454000 2026-11-27T02:09:53.453Z 0.10", false}, {"0.20 1795745394.454000 2026-11-27T02:09:54.755Z 0.10", false}} {
		w, err := parsePortWait(tc.line)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.check(); (err == nil) != tc.ok {
			t.Errorf("%q: check %v, want ok %v", tc.line, err, tc.ok)
		}
	}
	for _, bad := range []string{"", "0.5", "0.5 1795745394 2026-11-27T02:09:54Z 0.1", "0.5 1795745394.45 2026-11-27T02:09:54Z 0.1",
		"x 1795745394.454000 2026-11-27T02:09:54Z 0.1", "0.5 1795745394.454000 yesterday 0.1", "0.5 1795745394.454000 0.1",
		"0.5 1795745394.454000 2026-11-27T02:09:54Z", "0.5 1795745394.454000 2026-11-27T02:09:54Z x", "0.5 1795745394.454000 2026-11-27T02:09:54Z -1"} {
		if _, err := parsePortWait(bad); err == nil {
			t.Errorf("parsePortWait(%q): no error", bad)
		}
	}
}

// scriptedExecer answers serverClient's execs: the server's by port from servers, the
// client's from clients in turn; it records each command.
type scriptedExecer struct {
	mu      sync.Mutex
	cmds    []string
	servers map[string]error // by port; a server missing here ends at once, fine
	clients []error
}

func (s *scriptedExecer) Exec(_ context.Context, _, pod, _ string, cmd []string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmds = append(s.cmds, pod+": "+strings.Join(cmd, " "))
	port := cmd[len(cmd)-1]
	if pod == "srv" {
		return "server on " + port, s.servers[port]
	}
	err := s.clients[0]
	s.clients = s.clients[1:]
	return "client on " + port, err
}

func TestServerClient(t *testing.T) {
	defer func(d time.Duration) { serverBind = d }(serverBind)
	serverBind = time.Millisecond
	cmds := func(port string) ([]string, []string) {
		return []string{"tool", "-s", port}, []string{"tool", "-c", port}
	}
	refused := errors.New("connection refused")

	// The server not listening yet: the client is tried again, same port.
	ex := &scriptedExecer{clients: []error{refused, refused, nil}}
	if got := (&env{}).serverClient(t, ex, "ns", 7000, cmds, "srv", "cli"); got != "client on 7000" {
		t.Errorf("got %q", got)
	}
	if n := len(ex.cmds); n != 4 || !slices.Contains(ex.cmds, "srv: timeout 100 tool -s 7000") || !slices.Contains(ex.cmds, "cli: timeout 60 tool -c 7000") {
		t.Errorf("commands %q: want the server once and the client three times, each under timeout", ex.cmds)
	}

	// A failed exchange (the client gave up, the server ended in error) runs again on the
	// next port.
	ex = &scriptedExecer{servers: map[string]error{"7000": errors.New("exit 143")}, clients: append(slices.Repeat([]error{refused}, clientTries), nil)}
	if got := (&env{}).serverClient(t, ex, "ns", 7000, cmds, "srv", "cli"); got != "client on 7001" {
		t.Errorf("got %q", got)
	}
	if !slices.Contains(ex.cmds, "srv: timeout 100 tool -s 7001") {
		t.Errorf("commands %q: want a second server on 7001", ex.cmds)
	}

	// A client slow to fail (a starved guest's exec) met its server, unless it was rejected
	// (nothing listening yet): tried again on the same port; any other slow failure fails the
	// exchange, which runs again on the next port.
	defer func(d time.Duration) { metServer = d }(metServer)
	metServer = 0
	rejected := errors.New("command terminated with exit code 255 (stderr: cma event RDMA_CM_EVENT_REJECTED, error 8")
	ex = &scriptedExecer{clients: []error{rejected, rejected, nil}}
	if got := (&env{}).serverClient(t, ex, "ns", 7000, cmds, "srv", "cli"); got != "client on 7000" {
		t.Errorf("rejected: got %q, want the same port tried again", got)
	}
	ex = &scriptedExecer{clients: []error{refused, nil}}
	if got := (&env{}).serverClient(t, ex, "ns", 7000, cmds, "srv", "cli"); got != "client on 7001" {
		t.Errorf("slow failure: got %q, want the next port", got)
	}
	metServer = 10 * time.Second

	// The client passed, its server failed: a failed exchange too.
	ex = &scriptedExecer{servers: map[string]error{"7000": errors.New("exit 1")}, clients: []error{nil, nil}}
	if got := (&env{}).serverClient(t, ex, "ns", 7000, cmds, "srv", "cli"); got != "client on 7001" {
		t.Errorf("got %q", got)
	}
}

func TestBWResult(t *testing.T) {
	out := "server e2e/a (node n1, rxe0 net1)\nclient e2e/b (node n2, rxe0 net1)\nib_write_bw 65536 bytes, 5s: 0.00 Gb/sec average, 37 writes\n"
	if gbps, writes, err := bwResult(out); err != nil || gbps != 0 || writes != 37 {
		t.Errorf("bwResult = %v, %d, %v; want 0, 37", gbps, writes, err)
	}
	if _, _, err := bwResult(strings.Replace(out, "37 writes", "0 writes", 1)); err == nil {
		t.Error("0 writes: no error")
	}
	if _, _, err := bwResult("ib_write_bw 65536 bytes, 5s: 0.15 Gb/sec average\n"); err == nil {
		t.Error("no writes count: no error")
	}
}

// TestDeadlineSkip: with E2E_DEADLINE, a phase with less time left than its budget is skipped
// and says why; enough time, no budget or no deadline, it runs; a deadline that is no number
// is an error.
func TestDeadlineSkip(t *testing.T) {
	now := time.Unix(1795800000, 0)
	p := phase{name: "rxe-cluster-dra", budget: 15 * time.Minute}
	for _, tc := range []struct {
		name, deadline string
		p              phase
		skip           bool
	}{
		{"no deadline", "", p, false},
		{"enough", "1795801000", p, false},
		{"short", "1795800600", p, true},
		{"past", "1795799000", p, true},
		{"no budget", "1795800600", phase{name: "rxe-cluster"}, false},
	} {
		why, err := deadlineSkip(tc.p, tc.deadline, now)
		if err != nil || (why != "") != tc.skip {
			t.Errorf("%s: %q, %v; want skip %v", tc.name, why, err, tc.skip)
		}
		if tc.skip && !strings.Contains(why, "10m0s left") && !strings.Contains(why, "-16m40s left") {
			t.Errorf("%s: %q does not say the time left", tc.name, why)
		}
	}
	if _, err := deadlineSkip(p, "soon", now); err == nil {
		t.Error("E2E_DEADLINE=soon: no error")
	}
}

// TestTestDeadlineSkip: in a phase with a teardown, a test starts only with its budget plus the
// teardown left, and says so when it does not; a test without a budget there is an error, and
// the rxe-cluster harness gives every test of such a phase one.
func TestTestDeadlineSkip(t *testing.T) {
	now := time.Unix(1795800000, 0)
	p := phase{name: "rxe-cluster", teardown: 8 * time.Minute, testBudgets: map[string]time.Duration{"CrossNode": 5 * time.Minute}}
	for _, tc := range []struct {
		name, deadline string
		skip           bool
	}{
		{"no deadline", "", false},
		{"enough", "1795800780", false}, // 13 min
		{"short", "1795800779", true},   // 12m59s: CrossNode's 5 and the teardown's 8 do not fit
		{"no time", "1795799000", true}, // past
	} {
		why, err := testDeadlineSkip(p, "CrossNode", tc.deadline, now)
		if err != nil || (why != "") != tc.skip {
			t.Errorf("%s: %q, %v; want skip %v", tc.name, why, err, tc.skip)
		}
		if tc.skip && !strings.Contains(why, "rxe-cluster's CrossNode") {
			t.Errorf("%s: %q does not name the test", tc.name, why)
		}
	}
	if _, err := testDeadlineSkip(p, "MPIJob", "1795800780", now); err == nil {
		t.Error("a test without a budget: no error")
	}
	if why, err := testDeadlineSkip(phase{name: "device-plugin"}, "Allocatable", "1795800001", now); why != "" || err != nil {
		t.Errorf("a phase without a teardown: %q, %v; want it to run", why, err)
	}
	h, err := rxeCluster(map[string]string{"harness": "rxe-cluster", "image": "localhost/kube-rdma:e2e", "test-image": "localhost/rdma-test:e2e",
		"perf-image": "localhost/rdma-perf:e2e", "nodes": "rxec-1 rxec-2", "rdma-subnet-prefix": "10.78.0", "rdma-device": "rxe0",
		"api-server": "10.77.0.1:6443", "bw-seconds": "3", "rdma-netns-mode": "shared"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range h.phases {
		if p.teardown <= 0 {
			continue
		}
		if p.budget < p.teardown {
			t.Errorf("phase %s: budget %s < its teardown %s", p.name, p.budget, p.teardown)
		}
		for _, tc := range p.tests {
			if p.testBudgets[tc.name] <= 0 {
				t.Errorf("phase %s: test %s has no budget", p.name, tc.name)
			}
		}
	}
}
