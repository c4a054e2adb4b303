package suite

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The rxe-cluster harness (e2e/rxe-cluster): one or two qemu (TCG) guests, each a node with a
// kernel of its own (Debian's, whose rdma_rxe works across network namespaces), containerd and
// a kubelet, joined to a control plane in a network namespace made for the run. Each guest has
// one soft-RoCE device, rxe0, on eth1; the guests' eth1 share one link. Its hook describes it:
//
//	harness rxe-cluster, test-image (busybox and rdma-core's ibv_devices, no perftest: the
//	NodeState test's image), perf-image (busybox, perftest and rdmacm-utils: the cross-node
//	pods'), image (the kube-rdma image, REPO:TAG), nodes (the node names, in order), rdma-subnet-prefix (the RDMA link's
//	/24, as "A.B.C"), rdma-device (every guest's RDMA device), api-server (HOST:PORT where a
//	hostNetwork pod reaches the API server: the cluster has no kube-proxy), bw-seconds
//	(ib_write_bw's duration), rdma-netns-mode (the guests' RDMA netns mode: shared or exclusive)
//
// One phase, one release for every node, as a user installs it (each guest has its own kernel,
// so one pool of the device name fits every node): the suite's device plugin tests on the first
// node, the port of its NIC taken down (health_test.go and rxeclustertests_test.go), and with
// two nodes the cross-node checks: host-to-host ib_write_bw, `kubectl rdma bw` between pods
// on the two nodes through the API server and the kubelets' exec, rping (rdma_cm) between the
// same pods, `kubectl rdma doctor` on both.

// rxeClusterDesc is the rxe cluster's hook description, parsed.
type rxeClusterDesc struct {
	nodes               []string
	imageRepo, imageTag string
	perfImage           string
	subnet, device      string
	apiHost, apiPort    string
	netnsMode           string
	bwSeconds           int
}

func parseRXECluster(d map[string]string) (rxeClusterDesc, error) {
	c := rxeClusterDesc{nodes: strings.Fields(d["nodes"]), subnet: d["rdma-subnet-prefix"], device: d["rdma-device"], perfImage: d["perf-image"]}
	if len(c.nodes) == 0 {
		return c, fmt.Errorf("hook describe (rxe-cluster): no nodes")
	}
	if c.perfImage == "" {
		return c, fmt.Errorf("hook describe (rxe-cluster): no perf-image")
	}
	i := strings.LastIndex(d["image"], ":")
	if i <= 0 || i == len(d["image"])-1 {
		return c, fmt.Errorf("hook describe: image %q: want REPOSITORY:TAG", d["image"])
	}
	c.imageRepo, c.imageTag = d["image"][:i], d["image"][i+1:]
	if strings.Count(c.subnet, ".") != 2 {
		return c, fmt.Errorf("hook describe: rdma-subnet-prefix %q: want A.B.C", c.subnet)
	}
	if c.device == "" {
		return c, fmt.Errorf("hook describe (rxe-cluster): no rdma-device")
	}
	var ok bool
	if c.apiHost, c.apiPort, ok = strings.Cut(d["api-server"], ":"); !ok || c.apiHost == "" || c.apiPort == "" {
		return c, fmt.Errorf("hook describe: api-server %q: want HOST:PORT", d["api-server"])
	}
	secs, err := strconv.Atoi(orDefault(d["bw-seconds"], "5"))
	if err != nil || secs < 1 {
		return c, fmt.Errorf("hook describe: bw-seconds %q: want a positive number", d["bw-seconds"])
	}
	c.bwSeconds = secs
	if c.netnsMode = d["rdma-netns-mode"]; c.netnsMode != "shared" && c.netnsMode != "exclusive" {
		return c, fmt.Errorf("hook describe: rdma-netns-mode %q: want shared or exclusive", c.netnsMode)
	}
	return c, nil
}

// values are the release's: a pool of every node's soft-RoCE device, the CNI chained on it
// with one host-local range (the harness starts each node after the first 32 addresses
// further), the node state, NRI off (the containers' RLIMIT_MEMLOCK comes from the memlock
// hook in the pool's CDI spec alone, which CrossNode checks through doctor), and the API
// server's address for the daemon (no kube-proxy).
func (c rxeClusterDesc) values() values {
	return values{
		"image": values{"repository": c.imageRepo, "tag": c.imageTag, "pullPolicy": "Never"},
		"config": values{"resourcePrefix": "rdma.kube-rdma.io", "pools": []values{{
			"name": rxePool, "mode": "exclusive",
			"selectors": values{"kinds": []string{"virtual"}, "rdmaDevices": []string{c.device}}}}},
		"cni": values{"install": true, "mode": "chained", "chained": values{"pool": rxePool,
			"ipam": values{"type": "host-local", "ranges": [][]values{{{"subnet": c.subnet + ".0/24",
				"rangeStart": c.subnet + ".64", "rangeEnd": c.subnet + ".254"}}}}}},
		"devicePlugin": values{"extraEnv": []values{
			{"name": "KUBERNETES_SERVICE_HOST", "value": c.apiHost},
			{"name": "KUBERNETES_SERVICE_PORT", "value": c.apiPort}},
			// Each exec probe is a runc exec and a start of the binary: seconds of the
			// guest's one emulated CPU, which the defaults (readiness every 5 s, liveness
			// every 10 s, 5 s to answer) kept busy, and probes timed out on a slow host.
			"probes": values{
				"readiness": values{"periodSeconds": 15, "timeoutSeconds": 10},
				// A guest can be starved for minutes (kubelet housekeeping up to 11 s, probes
				// past their 10 s); liveness at 4 x 30 s restarts both daemons then, which only
				// adds a start and a scan to the starved CPU: 10 x 30 s here.
				"liveness": values{"initialDelaySeconds": 60, "periodSeconds": 30, "timeoutSeconds": 10, "failureThreshold": 10}},
			// A guest stalled for 40 s during an uninstall (containerd took 45 s to see a
			// 5 s-grace hook container exit): the daemon, killed 34 s after SIGTERM, left its
			// socket and CDI spec. Its exit needs milliseconds of a CPU that runs.
			"terminationGracePeriodSeconds": 120},
		"nodeState": values{"enabled": true},
		"nri":       values{"enabled": false},
	}
}

// rxeUninstallTimeout is helm uninstall's --timeout in the guests: its pre-delete hook is
// three pod starts in a row (the hook's pod on each node, then its Job's), and a pod start
// takes up to 1.5 min in a starved guest: 5 min is too tight for three of them and deletion.
const rxeUninstallTimeout = 10 * time.Minute

// rxeInstallTimeout is helm install's --timeout in the guests: the daemon's pod is three
// container starts (the CNI installer, then the daemon and the chain container) on the guest's
// one emulated CPU: a minute or two on an idle host, and more than 3 min on a loaded one.
const rxeInstallTimeout = 6 * time.Minute

// rxeTeardown: the rxe-cluster phase's helm uninstall and node checks at their longest on a
// starved host (7.2 min and 1 min).
const rxeTeardown = 8 * time.Minute

func rxeCluster(d map[string]string) (harness, error) {
	c, err := parseRXECluster(d)
	if err != nil {
		return harness{}, err
	}
	return harness{node: c.nodes[0], phases: []phase{{
		name: "rxe-cluster",
		config: func(cf *config) {
			cf.pools = []pool{{rxePool, "exclusive", 1}}
			cf.chainedPool, cf.portDevice = rxePool, c.device
		},
		releases: []release{{name: "kube-rdma", moreNodes: c.nodes[1:], values: []values{c.values()},
			report:           fmt.Sprintf("helm install on %d node(s): DaemonSet ready %%s s after", len(c.nodes)),
			uninstallTimeout: rxeUninstallTimeout, installTimeout: rxeInstallTimeout}},
		installed: func(t *testing.T, e *env) {
			for _, n := range c.nodes {
				e.waitChained(t, n)
			}
		},
		// CrossNode, the traffic between the nodes' pods, first of the long tests: under CI's
		// deadline on a slow host the tests after it are the ones skipped.
		tests: []namedTest{
			{"Allocatable", testAllocatable},
			{"PodWithDevices", testPodWithDevices},
			{"Pending", testPending},
			{"PortDown", testPortDown},
			{"PortDownDetection", func(t *testing.T, e *env) { testPortDownDetection(t, e, c) }},
			{"NodeState", testNodeState},
			{"CrossNode", func(t *testing.T, e *env) { testCrossNode(t, e, c) }},
			{"RestartHeld", testRestartHeld},
			{"MPIJob", func(t *testing.T, e *env) { testMPIJob(t, e, c) }},
			{"NonRootRegister", func(t *testing.T, e *env) { testNonRootRegister(t, e, c) }},
		},
		// Under E2E_DEADLINE (CI): the phase starts with its install (up to 6 min on a starved
		// guest) and teardown left, and each test with its own longest time on a starved host
		// plus the teardown: the helm uninstall (up to 7.2 min: its hook is three pod starts in
		// a row) and the node checks (1 min).
		budget:   rxeInstallTimeout + rxeTeardown,
		teardown: rxeTeardown,
		testBudgets: map[string]time.Duration{
			"Allocatable": 1 * time.Minute, "PodWithDevices": 3 * time.Minute, "Pending": 2 * time.Minute,
			"PortDown": 3 * time.Minute, "PortDownDetection": 4 * time.Minute, "NodeState": 2 * time.Minute,
			// Two pod starts (up to 2 min each), host and pod ib_write_bw, rping, doctor.
			"CrossNode": 5 * time.Minute,
			// The daemon's restart, 9 s of samples, the container's restart.
			"RestartHeld": 3 * time.Minute,
			// Four pods, the job twice and the failing job.
			"MPIJob": 6 * time.Minute,
			// One pod and the 8 MiB registration that must fail.
			"NonRootRegister": 2 * time.Minute,
		},
	}, c.draPhase()}}, nil
}

// rxeDRAPool is the dra phase's pool of the first node's device, served as a DRA driver.
const rxeDRAPool = "rxe-dra"

// draPhase: the first node's device served by the DRA front end, with the CNI chained in DRA
// mode (its claims' netdevs), the second node's by the device plugin (the chained CNI on its
// pool): two releases, each pinned to its node. A claim pod on the first node and a device
// plugin pod on the second move RDMA traffic to each other. Skipped with one node.
func (c rxeClusterDesc) draPhase() phase {
	// Its budget: the longest it was seen to take on a starved host, uninstalls included; with
	// E2E_DEADLINE (CI), less than 18 min left skips it, named in the report.
	p := phase{name: "rxe-cluster-dra", budget: 18 * time.Minute}
	if len(c.nodes) < 2 {
		p.skip = fmt.Sprintf("one node (%s): a claim pod and a device plugin pod on two nodes need two", c.nodes[0])
		return p
	}
	pin := func(node string, v values) values {
		v["nodeSelector"] = values{hostnameLabel: node}
		return v
	}
	dra := c.values()
	dra["config"] = values{"resourcePrefix": "rdma.kube-rdma.io", "pools": []values{{
		"name": rxeDRAPool, "mode": "exclusive", "frontend": "dra",
		"selectors": values{"kinds": []string{"virtual"}, "rdmaDevices": []string{c.device}}}}}
	dra["cni"].(values)["chained"].(values)["pool"] = rxeDRAPool
	dra["dra"] = values{"enabled": true}
	// NRI on beside the memlock hook: the runtime applies NRI's limit after the hook's.
	dra["nri"] = values{"enabled": true}
	p.config = func(cf *config) {
		cf.pools = []pool{{rxePool, "exclusive", 1}}
		cf.chainedPool = rxePool
		cf.dra = &draConfig{pools: map[string]int{rxeDRAPool: 1}}
	}
	p.releases = []release{
		{name: "kube-rdma", node: c.nodes[0], values: []values{pin(c.nodes[0], dra)},
			report:           "rxe-cluster-dra: release with the DRA front end on " + c.nodes[0] + ", DaemonSet ready %s s after helm install",
			uninstallTimeout: rxeUninstallTimeout, installTimeout: rxeInstallTimeout},
		{name: "kube-rdma-dp", node: c.nodes[1], values: []values{pin(c.nodes[1], c.values())},
			report:           "rxe-cluster-dra: release with the device plugin on " + c.nodes[1] + ", DaemonSet ready %s s after helm install",
			uninstallTimeout: rxeUninstallTimeout, installTimeout: rxeInstallTimeout},
	}
	p.installed = func(t *testing.T, e *env) {
		e.waitChained(t, c.nodes[1])
		err := eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
			_, err := runHookOn(ctx, e.hook, c.nodes[0], "cni-chained")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	p.tests = []namedTest{
		{"ClaimToDevicePluginPod", func(t *testing.T, e *env) { testDRAToDevicePluginPod(t, e, c) }},
		{"PortDownTaint", func(t *testing.T, e *env) { testRXEDRATaint(t, e, c) }},
	}
	p.after = func(t *testing.T, e *env) { e.waitNoDRASlices(t) }
	return p
}

// perftestGbps reads ib_write_bw's result line (--report_gbits), under its "#bytes
// #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]" header: the average and the
// writes completed. The average has two decimals, 0.00 on a slow soft-RoCE link whose writes
// went through: the writes are the evidence of traffic, and an error when there are none.
func perftestGbps(out string) (gbps float64, writes int64, err error) {
	header := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "#bytes" {
			header = strings.Contains(line, "Gb/sec")
			continue
		}
		if header && len(f) >= 4 {
			n, nerr := strconv.ParseInt(f[1], 10, 64)
			avg, aerr := strconv.ParseFloat(f[3], 64)
			if nerr == nil && aerr == nil {
				if n <= 0 {
					return avg, n, fmt.Errorf("ib_write_bw completed no RDMA write: %q", strings.TrimSpace(line))
				}
				return avg, n, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no Gb/sec result line in ib_write_bw's output: %q", strings.TrimSpace(out))
}

var inetLine = regexp.MustCompile(`(?m)^\s*inet ([0-9.]+)/[0-9]+`)

// inetAddr is the first IPv4 address in `ip -f inet addr show` output.
func inetAddr(out string) (string, error) {
	m := inetLine.FindStringSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no IPv4 address in %q", strings.TrimSpace(out))
	}
	return m[1], nil
}

var rpingLine = regexp.MustCompile(`(?m)^ping data: rdma-ping-[0-9]+: `)

// doctorVerdictOK says whether a `kubectl rdma doctor` line is acceptable for the cross-node
// pods: PASS; SKIP (a check that does not apply: the GPU<->NIC level of a pod without a GPU);
// and in the shared RDMA netns mode the warning that an exclusive pool is in that mode (the
// cluster's default mode, where rdma_cm works: see rdmaCMSkip).
func doctorVerdictOK(check, got, netnsMode string) bool {
	switch {
	case strings.HasPrefix(got, "PASS"), strings.HasPrefix(got, "SKIP"):
		return true
	case strings.HasPrefix(got, "WARN"):
		return netnsMode == "shared" && strings.HasPrefix(check, "netns mode for pool ")
	}
	return false
}

// rpingCount is how many pings rping -v printed.
func rpingCount(out string) int { return len(rpingLine.FindAllString(out, -1)) }

// medianWorst returns the median and the largest of ds (0, 0 for none).
func medianWorst(ds []time.Duration) (time.Duration, time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m, s[len(s)-1]
}
