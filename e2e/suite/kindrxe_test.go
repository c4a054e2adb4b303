package suite

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kind-rxe harness (e2e/kind-rxe): a kind cluster whose two workers have one soft-RoCE
// device each (rxe0 on the first, rxe1 on the second), on a Docker network of their own. Its
// hook describes it:
//
//	harness kind-rxe, test-image (with perftest), image (the kube-rdma image, REPO:TAG),
//	workers (the two node names, in order), rdma-subnet-prefix (the RDMA network's /24, as
//	"A.B.C"), bw-seconds (ib_write_bw's duration)
//
// One phase: one release per worker (RDMA device names are global to the kernel, so each
// worker's release selects its own device), the suite's device plugin tests on the first
// worker, then kubectl rdma bw between a pod on each worker.

const rxePool = "rxe"

func kindRXE(d map[string]string) (harness, error) {
	workers := strings.Fields(d["workers"])
	if len(workers) != 2 {
		return harness{}, fmt.Errorf("hook describe: workers %q: want two", d["workers"])
	}
	i := strings.LastIndex(d["image"], ":")
	if i <= 0 || i == len(d["image"])-1 {
		return harness{}, fmt.Errorf("hook describe: image %q: want REPOSITORY:TAG", d["image"])
	}
	repo, tag := d["image"][:i], d["image"][i+1:]
	subnet := d["rdma-subnet-prefix"]
	if strings.Count(subnet, ".") != 2 {
		return harness{}, fmt.Errorf("hook describe: rdma-subnet-prefix %q: want A.B.C", subnet)
	}
	secs, err := strconv.Atoi(orDefault(d["bw-seconds"], "5"))
	if err != nil || secs < 1 {
		return harness{}, fmt.Errorf("hook describe: bw-seconds %q: want a positive number", d["bw-seconds"])
	}
	var releases []release
	for i, w := range workers {
		name := "kube-rdma"
		if i > 0 {
			name = fmt.Sprintf("kube-rdma-w%d", i+1)
		}
		releases = append(releases, release{name: name, node: w, values: []values{{
			"image":        values{"repository": repo, "tag": tag, "pullPolicy": "Never"},
			"nodeSelector": values{hostnameLabel: w},
			"config": values{"resourcePrefix": "rdma.kube-rdma.io", "pools": []values{{
				"name": rxePool, "mode": "exclusive",
				"selectors": values{"kinds": []string{"virtual"}, "rdmaDevices": []string{fmt.Sprintf("rxe%d", i)}}}}},
			// The chained IPAM is the same host-local range on every node (one chart value);
			// the harness seeds each worker's start apart (run.sh seed_ipam).
			"cni": values{"install": true, "mode": "chained", "chained": values{"pool": rxePool,
				"ipam": values{"type": "host-local", "ranges": [][]values{{{"subnet": subnet + ".0/24",
					"rangeStart": subnet + ".64", "rangeEnd": subnet + ".254"}}}}}},
		}}})
	}
	return harness{node: workers[0], phases: []phase{{
		name: "device-plugin",
		config: func(c *config) {
			c.pools = []pool{{rxePool, "exclusive", 1}}
			c.chainedPool, c.portDevice = rxePool, "rxe0"
		},
		releases: releases,
		installed: func(t *testing.T, e *env) {
			for _, w := range workers {
				e.waitChained(t, w)
			}
		},
		tests: []namedTest{
			{"Allocatable", testAllocatable},
			{"PodWithDevices", testPodWithDevices},
			{"Pending", testPending},
			{"PortDown", testPortDown},
			{"KubeletRestart", testKubeletRestart},
			{"DaemonSetRestartAndHelmUpgrade", testDaemonSetRestartAndHelmUpgrade},
			{"NodeState", testNodeState},
			{"ParallelPods", testParallelPods},
			{"Bandwidth", func(t *testing.T, e *env) { testBandwidth(t, e, workers, secs) }},
		},
	}}}, nil
}

// waitChained waits until node advertises one device of the pool and its hook says the
// kube-rdma entry is in the node's conflist: a pod sandbox created before then gets no RDMA
// netdev.
func (e *env) waitChained(t *testing.T, node string) {
	t.Helper()
	err := eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		n, err := e.core.Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if q, ok := n.Status.Allocatable[e.resource(rxePool)]; !ok || q.Value() != 1 {
			return fmt.Errorf("node %s: allocatable %s %v, want 1", node, e.resource(rxePool), q.String())
		}
		_, err = runHookOn(ctx, e.hook, node, "cni-chained")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bwLine is kubectl rdma bw's result: the average Gb/sec (two decimals, 0.00 on a slow
// soft-RoCE link) and the RDMA writes completed, which say the traffic went through.
var bwLine = regexp.MustCompile(`(?m)^ib_write_bw .*: ([0-9.]+) Gb/sec average.*, ([0-9]+) writes$`)

// bwResult reads bwLine's match: the writes must be more than 0.
func bwResult(out string) (gbps float64, writes int64, err error) {
	m := bwLine.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("no bandwidth line in kubectl rdma bw's output:\n%s", out)
	}
	gbps, err = strconv.ParseFloat(m[1], 64)
	if err == nil {
		writes, err = strconv.ParseInt(m[2], 10, 64)
	}
	if err == nil && writes <= 0 {
		err = fmt.Errorf("kubectl rdma bw: %s", m[0])
	}
	return gbps, writes, err
}

// testBandwidth: kubectl rdma bw between a pod with the pool's device on each worker (server
// on the first) measures a bandwidth above 0.
func testBandwidth(t *testing.T, e *env, workers []string, secs int) {
	ns := e.namespace(t)
	names := []string{"bw-server", "bw-client"}
	for i, w := range workers {
		p := e.devicePod(ns, names[i], rxePool, 1)
		p.Spec.NodeSelector = map[string]string{hostnameLabel: w}
		c := &p.Spec.Containers[0]
		c.SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK"}}}
		e.createPod(t, p)
	}
	for _, n := range names {
		e.waitRunning(t, ns, n)
	}
	var out string
	for attempt, port := 1, 18515; ; attempt, port = attempt+1, port+1 {
		var code int
		out, code = e.kubectlRDMA(t, "bw", "-n", ns, names[0], names[1], "--duration", strconv.Itoa(secs), "--port", strconv.Itoa(port))
		t.Logf("kubectl rdma bw -n %s %s %s (attempt %d): exit %d\n%s", ns, names[0], names[1], attempt, code, out)
		if code == 0 {
			break
		}
		if attempt == 2 {
			t.Fatalf("kubectl rdma bw failed %d times", attempt)
		}
	}
	if _, _, err := bwResult(out); err != nil {
		t.Fatalf("%v, want RDMA writes completed", err)
	}
	e.appendReport(t, fmt.Sprintf("kubectl rdma bw %s -> %s: %s", workers[1], workers[0], bwLine.FindString(out)))
	for _, n := range names {
		e.deletePod(t, ns, n)
	}
}
