package suite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// The rxe cluster's own tests (rxecluster_test.go): real soft-RoCE ports and traffic.

// portDetectLimit is how soon after its link goes down the daemon must find a device
// Unhealthy (its health interval is 500 ms; the netlink link event re-reads at once).
const portDetectLimit = time.Second

// A poller of /state in the guest (hook port-wait) sees the change too, and its time is
// reported, not held to a limit: its wget and awk forks run on the same TCG vCPU as the
// kubelet and containerd, so it measures the guest (on a slow host, 4.2 s median with the
// daemon's own part well inside portDetectLimit), and the daemon's /state serves the health
// it set at healthSince.

// portDetectSamples is how many times testPortDownDetection takes the link down, and
// portDetectRetakes how many flaps it takes again when the guest stalled in its own link change.
const (
	portDetectSamples = 3
	portDetectRetakes = 3
)

// portWait is one port-wait: the seconds from the link change to the guest's poll of /state
// that saw the new health, and to the daemon's healthSince (the re-read that found it), both
// on the guest's clocks, and how long the guest took to make the change (linkSet: from the
// wall clock taken before it until `ip link set` returned).
type portWait struct{ seen, daemon, linkSet time.Duration }

// own is the daemon's part of its figure: the guest's time to make the change taken out.
func (w portWait) own() time.Duration { return max(w.daemon-w.linkSet, 0) }

// rxeHealthInterval is the daemon's --health-interval in the rxe cluster (the chart's default,
// "healthInterval":"500ms" in its log): the period of its sysfs re-reads.
const rxeHealthInterval = 500 * time.Millisecond

// check says why w's healthSince cannot be the change's. healthSince is when the re-read that
// found the new health started (nodewatch.Watcher.publish), so a periodic re-read that started
// before `ip link set` and read the port after it gives one up to a health interval before the
// change (-45 ms, say), so the bound is a health interval before it, not the change. A
// healthSince earlier than that is an older transition's; one later than the poll that saw it
// (100 ms of rounding: the poll's figure has two decimals) is a later one's.
func (w portWait) check() error {
	if w.daemon < -rxeHealthInterval || w.daemon > w.seen+100*time.Millisecond {
		return fmt.Errorf("the daemon's healthSince %s after the change, the poll saw it %s after: not the change's healthSince (a re-read may start up to %s before it)",
			w.daemon, w.seen, rxeHealthInterval)
	}
	return nil
}

// parsePortWait reads port-wait's "SEEN WALL_AT_CHANGE HEALTH_SINCE LINK_SET" line
// (e2e/rxe-cluster/hook.sh).
func parsePortWait(out string) (portWait, error) {
	f := strings.Fields(out)
	if len(f) != 4 {
		return portWait{}, fmt.Errorf("want 4 fields (seen seconds, wall clock at the change, healthSince, link set seconds), got %d", len(f))
	}
	linkSet, err := strconv.ParseFloat(f[3], 64)
	if err != nil || linkSet < 0 {
		return portWait{}, fmt.Errorf("link set seconds %q", f[3])
	}
	seen, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return portWait{}, err
	}
	sec, usec, ok := strings.Cut(f[1], ".")
	if !ok || len(usec) != 6 {
		return portWait{}, fmt.Errorf("wall clock %q is not seconds.microseconds", f[1])
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	us, err2 := strconv.ParseInt(usec, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return portWait{}, err
	}
	since, err := time.Parse(time.RFC3339Nano, f[2])
	if err != nil {
		return portWait{}, fmt.Errorf("healthSince: %w", err)
	}
	return portWait{seen: time.Duration(seen * float64(time.Second)), daemon: since.Sub(time.Unix(s, us*1000)),
		linkSet: time.Duration(linkSet * float64(time.Second))}, nil
}

// testPortDownDetection takes the link of the first node's RDMA NIC down in the guest (hook
// port-wait: the link change and the daemon's /state, polled in the guest, timed there), three
// times: the daemon must find the device Unhealthy within portDetectLimit (its healthSince,
// the median, after the guest's own `ip link set` returned), a poller of /state see it, the
// RDMANodeState and `kubectl rdma nodes` must show it, the node's allocatable lose it, and it
// must be Healthy and allocatable again after the link comes back.
func testPortDownDetection(t *testing.T, e *env, c rxeClusterDesc) {
	restored := e.portUpOnCleanup(t, c.device, nil)
	wait := func(state string) portWait {
		t.Helper()
		out := e.mustHook(t, time.Minute, "port-wait", c.device, state)
		w, err := parsePortWait(out)
		if err != nil {
			t.Fatalf("hook port-wait %s %s: %q: %v", c.device, state, out, err)
		}
		if err := w.check(); err != nil {
			t.Errorf("port-wait %s %s: %v", c.device, state, err)
		}
		return w
	}
	// Three flaps, the medians held to the limits: one sample of a TCG guest sharing two host
	// cores with the rest of the run measures the host's load as much as the daemon.
	// A flap whose own `ip link set` took longer than the limit times a stalled guest (its vCPU
	// not scheduled), not the daemon: it is reported and taken again, up to portDetectRetakes
	// times in all; more such flaps fail the test, saying the host is too loaded to measure.
	var daemon, own, linkSet, seen []time.Duration
	retaken := 0
	for len(daemon) < portDetectSamples {
		w := wait("down")
		if w.linkSet > portDetectLimit {
			retaken++
			t.Logf("flap taken again: the guest's `ip link set` itself took %s (the daemon: %s after it went down)", w.linkSet, w.daemon)
			if retaken > portDetectRetakes {
				t.Fatalf("%d flaps whose `ip link set` took longer than %s: the host is too loaded to time the daemon", retaken, portDetectLimit)
			}
		} else {
			daemon, own, linkSet, seen = append(daemon, w.daemon), append(own, w.own()), append(linkSet, w.linkSet), append(seen, w.seen)
		}
		if len(daemon) < portDetectSamples {
			wait("up")
		}
	}
	down, slowest := medianWorst(daemon)
	ownMed, _ := medianWorst(own)
	linkMed, _ := medianWorst(linkSet)
	seenMed, seenWorst := medianWorst(seen)
	if ownMed > portDetectLimit {
		t.Errorf("the daemon found %s Unhealthy a median %s after its link went down, %s after the guest's `ip link set` returned (%v, %v), want within %s",
			c.device, down, ownMed, daemon, linkSet, portDetectLimit)
	}
	start := time.Now()
	e.waitNodeState(t, "the device unhealthy", func(s *v1alpha1.RDMANodeState) error {
		if s.Status.Summary.Unhealthy != 1 {
			return fmt.Errorf("summary.unhealthy %d, want 1", s.Status.Summary.Unhealthy)
		}
		return nil
	})
	inState := time.Since(start)
	out, code := e.kubectlRDMA(t, "nodes")
	t.Logf("kubectl rdma nodes (port down):\n%s", out)
	if got, ok := nodesCell(out, e.node, "UNHEALTHY"); code != 0 || got != c.device {
		t.Errorf("kubectl rdma nodes (exit %d): %s's UNHEALTHY %q (row found: %v), want %s", code, e.node, got, ok, c.device)
	}
	// The kubelet, too: its node status shows the pool without the device (its device
	// manager has the daemon's ListAndWatch update), and with it again after the link is back.
	// The next test's pods are admitted by that device manager: a pod that the scheduler
	// placed while the kubelet still held the device unhealthy failed admission
	// (UnexpectedAdmissionError) in a run where the guests were slow.
	none := maps.Clone(e.counts())
	none[rxePool] = 0
	if err := e.waitAllocatable(t.Context(), time.Minute, none); err != nil {
		t.Errorf("port down: %v", err)
	}
	up := wait("up")
	restored()
	e.waitNodeState(t, "the device healthy again", func(s *v1alpha1.RDMANodeState) error {
		if s.Status.Summary.Unhealthy != 0 {
			return fmt.Errorf("summary.unhealthy %d, want 0", s.Status.Summary.Unhealthy)
		}
		return nil
	})
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Errorf("port up again: %v", err)
	}
	line := fmt.Sprintf("port down: %s Unhealthy in the daemon after %.2f s median of %d, worst %.2f (healthSince), %.2f s median after the guest's `ip link set` returned (it took %.2f s); seen by a /state poller in the guest after %.2f s median, worst %.2f; in the RDMANodeState %.1f s later; Healthy %.2f s (daemon) %.2f s (poller) after the link came back; %d flaps taken again (the guest stalled in its own link change)",
		c.device, down.Seconds(), len(daemon), slowest.Seconds(), ownMed.Seconds(), linkMed.Seconds(), seenMed.Seconds(), seenWorst.Seconds(), inState.Seconds(), up.daemon.Seconds(), up.seen.Seconds(), retaken)
	t.Log(line)
	e.appendReport(t, line)
}

// nodesCell is the cell of column in node's row of `kubectl rdma nodes` (a table aligned
// with spaces, whose cells may hold spaces: the header gives where each column starts).
func nodesCell(out, node, column string) (string, bool) {
	start, end := -1, -1
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if start < 0 {
			if start = strings.Index(line, column); start < 0 {
				continue
			}
			rest := line[start+len(column):]
			if i := strings.IndexFunc(rest, func(r rune) bool { return r != ' ' }); i >= 0 {
				end = start + len(column) + i
			}
			continue
		}
		if f := strings.Fields(line); len(f) == 0 || f[0] != node || len(line) <= start {
			continue
		}
		if end < 0 || end > len(line) {
			end = len(line)
		}
		return strings.TrimSpace(line[start:end]), true
	}
	return "", false
}

// testCrossNode: ib_write_bw between the first two guests' root network namespaces, then a pod
// with the pool's device on each of the two nodes: `kubectl rdma bw` between them (server on
// the first), its ratio to the host-to-host figure, rping (rdma_cm) between the same pods over
// their RDMA netdevs, and `kubectl rdma doctor` on both: every check passes (doctorVerdictOK).
func testCrossNode(t *testing.T, e *env, c rxeClusterDesc) {
	if len(c.nodes) < 2 {
		t.Skipf("one node (%s): the cross-node checks need two", c.nodes[0])
	}
	secs := strconv.Itoa(c.bwSeconds)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	out, err := runHook(ctx, e.hook, "host-bw", c.nodes[0], c.nodes[1], secs)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	host, hostWrites, err := perftestGbps(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ib_write_bw host-to-host %s -> %s: %.2f Gb/sec, %d writes", c.nodes[1], c.nodes[0], host, hostWrites)
	rxeHostBW.Lock()
	rxeHostBW.gbps = host
	rxeHostBW.Unlock()

	ns := e.namespace(t)
	names := []string{"rdma-a", "rdma-b"}
	for i, n := range names {
		p := e.devicePod(ns, n, rxePool, 1)
		p.Spec.Containers[0].Image = c.perfImage
		p.Spec.NodeSelector = map[string]string{hostnameLabel: c.nodes[i]}
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}}
		e.createPod(t, p)
	}
	var starts []time.Duration
	for _, n := range names {
		p := e.waitRunning(t, ns, n)
		if r := container(p).State.Running; r != nil {
			starts = append(starts, r.StartedAt.Sub(p.CreationTimestamp.Time))
		}
	}
	med, worst := medianWorst(starts)

	var pod float64
	var podWrites int64
	for attempt, port := 1, 18515; ; attempt, port = attempt+1, port+1 {
		out, code := e.kubectlRDMA(t, "bw", "-n", ns, names[0], names[1], "--duration", secs, "--port", strconv.Itoa(port), "--qp-timeout", "18", "--wait", "3m")
		t.Logf("kubectl rdma bw -n %s %s %s (attempt %d): exit %d\n%s", ns, names[0], names[1], attempt, code, out)
		if code == 0 {
			if pod, podWrites, err = bwResult(out); err != nil {
				t.Fatalf("%v, want RDMA writes completed", err)
			}
			break
		}
		if attempt == 3 { // a starved guest's exec can miss bw's deadline
			t.Fatalf("kubectl rdma bw failed %d times", attempt)
		}
	}

	ex, err := kubectlrdma.NewExecer(kubeconfigFlags())
	if err != nil {
		t.Fatal(err)
	}
	pings, rdmaCM := 0, "rdma_cm"
	if why := rdmaCMSkip(c); why != "" {
		rdmaCM = "rdma_cm skipped"
		t.Logf("rping skipped: %s", why)
	} else {
		pings = e.rping(t, ex, ns, names[0], names[1])
	}

	checks := []int{}
	for _, n := range names {
		out, code := e.kubectlRDMA(t, "doctor", "-n", ns, n)
		t.Logf("kubectl rdma doctor -n %s %s: exit %d\n%s", ns, n, code, out)
		lines := doctorLines(out)
		for check, got := range lines {
			if !doctorVerdictOK(check, got, c.netnsMode) {
				t.Errorf("doctor on %s: %q: %s", n, check, got)
			}
		}
		if code != 0 || len(lines) == 0 {
			t.Errorf("doctor on %s: exit %d, %d checks", n, code, len(lines))
		}
		// NRI is off: the container's own processes have the pool's limit (unlimited) from
		// the memlock hook, a kubectl exec'd shell the runtime's.
		if got := lines["in container: ulimit -l (locked memory)"]; !strings.HasPrefix(got, "PASS unlimited for the container's processes") {
			t.Errorf("doctor on %s: locked memory %q: want the container's processes unlimited by the memlock hook (NRI off), an exec'd shell at the runtime's limit", n, got)
		}
		checks = append(checks, len(lines))
	}
	// The ratio of the writes (the same size and duration both times): the Gb/sec figures
	// have two decimals, too few on a slow host.
	line := fmt.Sprintf("cross-node: pod start median %.1f s worst %.1f s (%d pods); kubectl rdma bw %s -> %s %.2f Gb/sec (%d writes), host-to-host %.2f Gb/sec (%d writes), ratio %.2f; rping (%s) %d/%d; doctor %v checks, failed: %v",
		med.Seconds(), worst.Seconds(), len(starts), c.nodes[1], c.nodes[0], pod, podWrites, host, hostWrites, float64(podWrites)/float64(hostWrites),
		rdmaCM, pings, rpingCountWant, checks, t.Failed())
	t.Log(line)
	e.appendReport(t, line)
	for _, n := range names {
		e.deletePod(t, ns, n)
	}
}

const rpingCountWant = 10

// rdmaCMSkip says why rdma_cm cannot connect between the cluster's pods, "" where it can: in
// the exclusive RDMA netns mode the CNI moves each pod's re-created soft-RoCE device into the
// pod's netns, and on the guests' kernel (7.3) a moved rxe device has no GSI QP (QP1: the
// kernel logs rxe_create_qp err -22, "Couldn't create ib_mad QP1"), so rdma_cm's connection
// management has nothing to talk through (docs/cni.md, "Limits"). Verbs traffic over RC QPs
// exchanged out of band (ib_write_bw without -R, kubectl rdma bw) is not affected.
func rdmaCMSkip(c rxeClusterDesc) string {
	if c.netnsMode == "exclusive" {
		return "exclusive RDMA netns mode: a soft-RoCE device moved into a pod's netns has no GSI QP " +
			"on the guests' kernel, so rdma_cm cannot connect (docs/cni.md, Limits)"
	}
	return ""
}

// testDRAToDevicePluginPod: a pod with a claim of the first node's device (DRA front end, the
// CNI in DRA mode) and a pod with the second node's device (device plugin, the CNI on its
// pool): rping, and ib_write_bw -R (perftest connecting through rdma_cm), between them; the
// claim's status.devices entry names the claim pod's net1, its address and MAC, Ready.
func testDRAToDevicePluginPod(t *testing.T, e *env, c rxeClusterDesc) {
	e.needDRA(t)
	ns := e.namespace(t)
	tmpl := "one-" + rxeDRAPool
	e.createTemplate(t, ns, tmpl, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(rxeDRAPool))}})
	lock := &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}}
	a := e.claimPod(ns, "dra-a", tmpl)
	b := e.devicePod(ns, "dp-b", rxePool, 1)
	for i, p := range []*corev1.Pod{a, b} {
		p.Spec.Containers[0].Image, p.Spec.Containers[0].SecurityContext = c.perfImage, lock
		p.Spec.NodeSelector = map[string]string{hostnameLabel: c.nodes[i]}
		e.createPod(t, p)
	}
	for _, p := range []*corev1.Pod{a, b} {
		e.waitRunning(t, ns, p.Name)
	}
	claim := e.podClaim(t, ns, a.Name)
	// The claim pod read its device metadata file (KEP-5304), naming its device.
	dev, err := e.draDevice(t.Context(), draDriver, allocated(t, claim)["nic"].Device)
	if err != nil {
		t.Fatal(err)
	}
	if _, m := e.checkMetadata(t, ns, a.Name, "devices", "nic", dev); m.Attributes[attrRDMA].StringValue != nil {
		line := fmt.Sprintf("dra: claim pod %s read its metadata file: device %s (%s)", a.Name, m.Name, *m.Attributes[attrRDMA].StringValue)
		t.Log(line)
		e.appendReport(t, line)
	}
	ex, err := kubectlrdma.NewExecer(kubeconfigFlags())
	if err != nil {
		t.Fatal(err)
	}
	perf := []string{"ib_write_bw", "-R", "-s", "65536", "-D", strconv.Itoa(c.bwSeconds), "-F", "--report_gbits", "-u", "18"}
	pings, rdmaCM, perfName := 0, "rdma_cm", "ib_write_bw -R"
	if why := rdmaCMSkip(c); why != "" {
		// The same traffic with its QPs exchanged over TCP instead.
		perf, rdmaCM, perfName = slices.Delete(perf, 1, 2), "rdma_cm skipped", "ib_write_bw"
		t.Logf("rping and ib_write_bw -R skipped, ib_write_bw without -R instead: %s", why)
	} else {
		pings = e.rping(t, ex, ns, a.Name, b.Name)
	}
	ip := e.net1Addr(t, ex, ns, a.Name)
	// The claim's status says where its device went (KEP-4817, pkg/claimstatus).
	st := e.waitClaimNetwork(t, ns, claim.Name, allocated(t, claim)["nic"], "net1", ip+"/")
	t.Logf("claim %s: status.devices %s/%s: %+v", claim.Name, st.Pool, st.Device, *st.NetworkData)
	out := e.serverClient(t, ex, ns, 18700, func(port string) ([]string, []string) {
		server := append(slices.Clone(perf), "-p", port)
		return server, append(slices.Clone(server), ip)
	}, a.Name, b.Name)
	gbps, writes, err := perftestGbps(out)
	if err != nil {
		t.Fatalf("%s %s -> %s: %v\n%s", perfName, b.Name, a.Name, err, out)
	}
	line := fmt.Sprintf("dra: claim pod on %s (claim %s) <-> device plugin pod on %s: rping (%s) %d/%d, %s %.2f Gb/sec (%d writes)",
		c.nodes[0], claim.Name, c.nodes[1], rdmaCM, pings, rpingCountWant, perfName, gbps, writes)
	t.Log(line)
	e.appendReport(t, line)
	for _, p := range []*corev1.Pod{a, b} {
		e.deletePod(t, ns, p.Name)
	}
	e.waitClaimGone(t, ns, claim.Name)
}

// rping runs rping's server in pod a and its client in pod b, over a's RDMA netdev (net1)
// address: connection set up through rdma_cm, as communication libraries do. It returns the
// pings the client printed and fails t unless all rpingCountWant came back.
func (e *env) rping(t *testing.T, ex kubectlrdma.Execer, ns, a, b string) int {
	t.Helper()
	ip := e.net1Addr(t, ex, ns, a)
	count := strconv.Itoa(rpingCountWant)
	got := e.serverClient(t, ex, ns, 7174, func(port string) ([]string, []string) {
		return []string{"rping", "-s", "-a", ip, "-p", port, "-C", count, "-v"},
			[]string{"rping", "-c", "-a", ip, "-p", port, "-C", count, "-v"}
	}, a, b)
	n := rpingCount(got)
	t.Logf("rping %s -> %s (%s, rdma_cm): %d pings\n%s", b, a, ip, n, got)
	if n != rpingCountWant {
		t.Errorf("rping: %d pings, want %d", n, rpingCountWant)
	}
	return n
}

// net1Addr is the IPv4 address of pod's RDMA netdev, net1.
func (e *env) net1Addr(t *testing.T, ex kubectlrdma.Execer, ns, pod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := ex.Exec(ctx, ns, pod, "test", []string{"ip", "-f", "inet", "addr", "show", "dev", "net1"})
	if err != nil {
		t.Fatalf("net1 of %s: %v", pod, err)
	}
	ip, err := inetAddr(out)
	if err != nil {
		t.Fatalf("net1 of %s: %v", pod, err)
	}
	return ip
}

// Bounds of one server/client exchange (serverClient). Each tool runs under busybox's
// timeout in its pod, so a hung one ends there, prints what it had, and frees its port: an
// exec cancelled from here would leave the process running in the pod.
const (
	serverSeconds = 100 // the server waits for its client, then serves it
	clientSeconds = 60  // rping -C 10 or ib_write_bw -D 5 take a few seconds under TCG
	// exchangeTries: the exchanges run again, on the next port, after a failure. Under TCG on a
	// loaded two-core host an rdma_cm exchange can hang until the test's deadline
	// (rxe-cluster-dra, 157 s) where it otherwise passes; the first failure is logged whole
	// (both sides' output), and the second must pass.
	exchangeTries = 2
)

// serverBind is how long a client waits for its server to listen before its first try, and
// by how much longer before each next one; metServer is how long a client that failed must
// have run to have met its server.
var serverBind, metServer = time.Second, 10 * time.Second

// clientTries bounds the client's tries against one server (1+2+...+7 s of waits at most).
const clientTries = 7

// serverClient runs cmds(port)'s server in pod srv (exec, in the background), then its
// client in pod cli, retried while the server is not listening yet (clientTries times, a second
// more apart each time), and returns the client's output. An exchange that fails runs again once on port+1;
// t fails when both do.
func (e *env) serverClient(t *testing.T, ex kubectlrdma.Execer, ns string, port int, cmds func(port string) (server, client []string), srv, cli string) string {
	t.Helper()
	for try := 1; ; try, port = try+1, port+1 {
		server, client := cmds(strconv.Itoa(port))
		got, served, err := e.exchange(t, ex, ns, srv, server, cli, client)
		if err == nil {
			return got
		}
		msg := fmt.Sprintf("exchange %d of %d: %v\nclient %s in %s:\n%s\nserver %s in %s:\n%s", try, exchangeTries, err,
			strings.Join(client, " "), cli, got, strings.Join(server, " "), srv, served)
		if try == exchangeTries {
			t.Fatal(msg)
		}
		t.Log(msg)
	}
}

// exchange is one try of serverClient: the client's output, the server's, and the first
// error of the two.
func (e *env) exchange(t *testing.T, ex kubectlrdma.Execer, ns, srv string, server []string, cli string, client []string) (got, served string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), (serverSeconds+20)*time.Second)
	defer cancel()
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := ex.Exec(ctx, ns, srv, "test", append([]string{"timeout", strconv.Itoa(serverSeconds)}, server...))
		done <- result{out, err}
	}()
	for try := 1; ; try++ {
		time.Sleep(time.Duration(try) * serverBind) // the server binds first; a starved one takes longer
		start := time.Now()
		got, err = ex.Exec(ctx, ns, cli, "test", append([]string{"timeout", strconv.Itoa(clientSeconds)}, client...))
		// A client that fails at once found no server yet; one that ran a while met it, unless
		// its connection was rejected, the answer of a peer where nothing listens on the port
		// yet (an exec into a starved TCG guest can take more than those 10 s).
		if err == nil || try == clientTries || ctx.Err() != nil || (time.Since(start) > metServer && !noListener(got, err)) {
			break
		}
		t.Logf("%s in %s (try %d): %v\n%s", client[0], cli, try, err, got)
	}
	if err != nil {
		err = fmt.Errorf("client: %w", err)
		select { // what the server printed, when it has ended
		case r := <-done:
			served = r.out
		case <-time.After(5 * time.Second):
			served = "(still running)"
		}
		return got, served, err
	}
	r := <-done // it ends once its client has
	if r.err != nil {
		return got, r.out, fmt.Errorf("server: %w", r.err)
	}
	return got, r.out, nil
}

// noListener says whether a client's output or error is that of a peer with nothing
// listening yet: rdma_cm's REJECTED (reason 8, invalid service ID), perftest's failed TCP
// connect of its out-of-band exchange.
func noListener(out string, err error) bool {
	s := out
	if err != nil {
		s += err.Error()
	}
	return strings.Contains(s, "RDMA_CM_EVENT_REJECTED") || strings.Contains(s, "Couldn't connect to")
}

// kubeconfigFlags points client options at the suite's cluster (E2E_KUBECONFIG).
func kubeconfigFlags() *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(false)
	kc := os.Getenv("E2E_KUBECONFIG")
	f.KubeConfig = &kc
	return f
}

// draTaintLimit is how soon after the hook that takes a link down has returned the API server
// must show its device tainted (the median), plus the median time the hook itself took. The
// hook's command into the guest is reported, not held: under TCG it took 0.3 s on one host and
// 3-6 s on a slower one, the guest's time and not the daemon's. The taint's way out is a
// round trip of the same guest (the daemon's ResourceSlice write to the API server on the
// host), so the hook's time is allowed on top: on the slower host the guest's kubelet logged
// housekeeping of 6 s during a flap, and the taint came 4.1 s (median) after the hook returned
// (10.9 s on the worst flap) while the hooks took 2.9-6.5 s. A daemon that waited for the
// slices' pacing interval or a failed call's backoff instead of publishing at once
// (dra.Pacer.Urgent) still fails it on a fast guest; TestDriverAgainstAPIServer holds the
// daemon's own part against a real API server without a guest (under a second).
const draTaintLimit = 2 * time.Second

// testRXEDRATaint takes the link of the first node's soft-RoCE device down in the guest while
// the DRA front end serves it: its device in the ResourceSlice gets the port-down taint
// (NoSchedule) within draTaintLimit of the hook's return (the median of three flaps), as the API server shows it; with the link back up the
// taint goes.
func testRXEDRATaint(t *testing.T, e *env, c rxeClusterDesc) {
	devs, err := e.draDevices(t.Context(), draDriver)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return attrString(d, attrRDMA) == c.device })
	if i < 0 {
		t.Fatalf("%s is not published by %s on %s", c.device, draDriver, e.node)
	}
	target := devs[i].Name
	e.waitTaint(t, target, false)
	// Where the kubelet writes device health into pods' status (ResourceHealthStatus, on by
	// default from 1.36), a claim pod holds the device during the first flap: its status must
	// show the device Unhealthy while the port is down, Healthy again after (the driver's
	// health reports, KEP-4680), and kubectl rdma must say so.
	gate, err := e.kubeletGateOn(t, resourceHealthGate, 36)
	if err != nil {
		t.Fatal(err)
	}
	var ns, holder string
	if gate {
		ns, holder = e.namespace(t), "dra-holder"
		tmpl := "hold-" + rxeDRAPool
		e.createTemplate(t, ns, tmpl, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(rxeDRAPool))}})
		p := e.claimPod(ns, holder, tmpl)
		p.Spec.NodeSelector = map[string]string{hostnameLabel: c.nodes[0]}
		e.createPod(t, p)
		e.waitRunning(t, ns, holder)
		if got := allocated(t, e.podClaim(t, ns, holder))["nic"].Device; got != target {
			t.Fatalf("claim of %s got device %s, want %s (the pool's one device on %s)", holder, got, target, c.nodes[0])
		}
		if err := e.waitClaimPodHealth(t.Context(), ns, holder, corev1.ResourceHealthStatusHealthy); err != nil {
			t.Fatalf("before the port goes down: %v", err)
		}
	} else {
		t.Logf("the kubelet runs without %s: no device health in the claim pod's status to check", resourceHealthGate)
	}
	restored := e.portUpOnCleanup(t, c.device, nil)
	tainted := func(want bool) (took, hook time.Duration) {
		t.Helper()
		start := time.Now()
		e.mustHook(t, 30*time.Second, "port-state", c.device, "1", map[bool]string{true: "down", false: "up"}[want])
		hook = time.Since(start)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for {
			d, err := e.draDevice(ctx, draDriver, target)
			if err == nil && slices.ContainsFunc(d.Taints, func(x resourceapi.DeviceTaint) bool {
				return x.Key == taintPort && x.Effect == resourceapi.DeviceTaintEffectNoSchedule
			}) == want {
				took = time.Since(start)
				t.Logf("%s tainted %v %s after the hook started (the hook took %s)", target, want, took.Round(time.Millisecond), hook.Round(time.Millisecond))
				return took, hook
			}
			select {
			case <-ctx.Done():
				t.Fatalf("device %s: tainted %v not within a minute (last error %v)", target, want, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// Three flaps, the median held to the limit (as testPortDownDetection's).
	var downs, afterHook, hooks []time.Duration
	var up time.Duration
	for i := range portDetectSamples {
		if i > 0 {
			// The slices' pacing (dra.DefaultPublishInterval) holds a change that comes
			// within 2 s of the last write back to the interval's end: wait it out, so each
			// flap measures the first change.
			time.Sleep(dra.DefaultPublishInterval + 500*time.Millisecond)
		}
		took, hook := tainted(true)
		downs, afterHook, hooks = append(downs, took), append(afterHook, took-hook), append(hooks, hook)
		if holder != "" && i == 0 {
			start := time.Now().Add(-took)
			if err := e.waitClaimPodHealth(t.Context(), ns, holder, corev1.ResourceHealthStatusUnhealthy); err != nil {
				t.Fatalf("port down: %v", err)
			}
			line := fmt.Sprintf("dra: the claim pod holding %s showed it Unhealthy in its status (allocatedResourcesStatus) %.1f s after the hook that took its link down started",
				target, time.Since(start).Seconds())
			t.Log(line)
			e.appendReport(t, line)
			e.checkPodHealthCLI(t, ns, map[string]string{rxeDRAPool: holder}, rxeDRAPool)
		}
		up, _ = tainted(false)
		if holder != "" && i == 0 {
			if err := e.waitClaimPodHealth(t.Context(), ns, holder, corev1.ResourceHealthStatusHealthy); err != nil {
				t.Fatalf("port up again: %v", err)
			}
		}
	}
	restored()
	down, slowest := medianWorst(downs)
	after, _ := medianWorst(afterHook)
	hook, _ := medianWorst(hooks)
	if limit := draTaintLimit + hook; after > limit {
		t.Errorf("device %s tainted a median %s after the hook that took its link down returned (%v after it started, the hook %v), want within %s (%s and the hook's median)",
			target, after, downs, hooks, limit, draTaintLimit)
	}
	line := fmt.Sprintf("dra: %s's link down: device %s tainted within %.2f s median of %d, worst %.2f (hook included; %.2f s median after the hook, which took %.2f s, returned); taint gone %.2f s after the link came back",
		c.device, target, down.Seconds(), len(downs), slowest.Seconds(), after.Seconds(), hook.Seconds(), up.Seconds())
	t.Log(line)
	e.appendReport(t, line)
}

// registerBytes is what testNonRootRegister's pod registers: 64 MiB, eight
// times the locked memory containerd gives a container under systemd's
// default.
const registerBytes = 64 << 20

// nonRootRegisterScript runs as the container's first process (a kubectl
// exec'd process would get the runtime's limit, not the pool's) on the pod's
// device (KUBE_RDMA_RXE_RDMA_DEVICES), with the RoCE v2 GID of an IPv4
// address the pod sees (read with the read builtin: one cat per slot of the
// table is slow under emulation). ibv_rc_pingpong's server registers its
// buffer of SIZE bytes before it listens: first with the limit lowered to
// 8 MiB (it must fail: "Couldn't register MR"), then at the container's
// limit, where the script waits until its port listens (registered) and
// stops it; exchanging 64 MiB over soft-RoCE under emulation takes over a
// minute, and registering is what the limit decides. Each outcome is one
// line: "control ...", "registered ...".
const nonRootRegisterScript = `dev=$KUBE_RDMA_RXE_RDMA_DEVICES
d=/sys/class/infiniband/$dev/ports/1
gid=
for f in "$d"/gid_attrs/types/*; do
	i=${f##*/}
	{ read -r t < "$f" && read -r g < "$d/gids/$i"; } 2>/dev/null || continue
	case "$t $g" in "RoCE v2 0000:0000:0000:0000:0000:ffff:"*) gid=$i; break;; esac
done
echo "limits $(awk '/^Max locked memory/ {print $4, $5}' /proc/self/limits) uid $(id -u) device $dev gid-index $gid"
[ -n "$gid" ] || { echo "no RoCE v2 IPv4 GID on $dev"; exit 1; }
out=$( (ulimit -l 8192 && exec ibv_rc_pingpong -d "$dev" -g "$gid" -s SIZE -n 1 -p CONTROLPORT) 2>&1 )
echo "control at 8 MiB: exit $? $(echo "$out" | grep -i register | head -n 1)"
ibv_rc_pingpong -d "$dev" -g "$gid" -s SIZE -n 1 -p PORT &
pid=$!
n=0
until grep -qE ':PORTHEX [0-9A-F]+:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
	if ! kill -0 $pid 2>/dev/null; then wait $pid; echo "failed: ibv_rc_pingpong exited $? before it listened"; exit 1; fi
	n=$((n+1)); [ $n -lt 120 ] || { echo "failed: not listening after 120 s"; exit 1; }
	sleep 1
done
echo "registered SIZE bytes: listening on PORT"
kill $pid
`

// testNonRootRegister: a pod running as uid 1000 without CAP_IPC_LOCK
// registers 64 MiB on its device (ibv_rc_pingpong's server, as the
// container's first process), while the same registration with the limit
// lowered to containerd's default 8 MiB fails. NRI is off in this phase: the
// limit comes from the memlock hook of the pool's CDI spec.
func testNonRootRegister(t *testing.T, e *env, c rxeClusterDesc) {
	const port, control = 18600, 18601
	ns := e.namespace(t)
	script := strings.NewReplacer("SIZE", strconv.Itoa(registerBytes), "CONTROLPORT", strconv.Itoa(control),
		"PORTHEX", fmt.Sprintf("%04X", port), "PORT", strconv.Itoa(port)).Replace(nonRootRegisterScript)
	name := "register-64m"
	p := e.devicePod(ns, name, rxePool, 1)
	uid := int64(1000)
	nonRoot := true
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &nonRoot}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Image, p.Spec.Containers[0].Command = c.perfImage, []string{"sh", "-c", script}
	e.createPod(t, p)
	var pod *corev1.Pod
	err := eventually(t.Context(), podStartup+2*time.Minute, func(ctx context.Context) error {
		var err error
		if pod, err = e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("pod %s: phase %s", name, pod.Status.Phase)
		}
		return nil
	})
	out, lerr := e.logs(t.Context(), ns, name)
	t.Logf("pod %s (uid 1000, no CAP_IPC_LOCK, NRI off): %v\n%s%v", name, err, out, lerr)
	if err != nil || pod.Status.Phase != corev1.PodSucceeded {
		e.dumpPod(t, ns, name)
		t.Fatalf("pod %s: %v: want it to register %d bytes and succeed", name, err, registerBytes)
	}
	if !strings.Contains(out, "limits unlimited unlimited uid 1000") {
		t.Errorf("pod %s: want RLIMIT_MEMLOCK unlimited (the pool's memlock, from its CDI spec's hook) for uid 1000", name)
	}
	if !strings.Contains(out, "control at 8 MiB: exit 1 Couldn't register MR") {
		t.Errorf("pod %s: the registration at 8 MiB did not fail with \"Couldn't register MR\": the check could not tell", name)
	}
	if !strings.Contains(out, fmt.Sprintf("registered %d bytes", registerBytes)) {
		t.Errorf("pod %s: did not register %d bytes", name, registerBytes)
	} else {
		e.appendReport(t, fmt.Sprintf("rxe-cluster: a pod as uid 1000 without CAP_IPC_LOCK registered %d MiB on %s with NRI off (the memlock hook; at 8 MiB the same registration failed)",
			registerBytes>>20, c.device))
	}
	e.deletePod(t, ns, name)
}
