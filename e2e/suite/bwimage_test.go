package suite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testBWImage: a pod with the pool's device on each of the two nodes, in the test image, which
// has no perftest. `kubectl rdma bw` between them must fail naming the missing ib_write_bw;
// with `--image` of the perf image it runs perftest in a privileged ephemeral container it adds
// to each pod, and RDMA writes must complete; each such container then ends (bw is done with
// it).
func testBWImage(t *testing.T, e *env, c rxeClusterDesc) {
	if len(c.nodes) < 2 {
		t.Skipf("one node (%s): bw needs a pod on each of two", c.nodes[0])
	}
	ns := e.namespace(t)
	names := []string{"plain-a", "plain-b"}
	for i, n := range names {
		p := e.devicePod(ns, n, rxePool, 1)
		p.Spec.NodeSelector = map[string]string{hostnameLabel: c.nodes[i]}
		e.createPod(t, p)
	}
	for _, n := range names {
		e.waitRunning(t, ns, n)
	}
	out, code := e.kubectlRDMA(t, "bw", "-n", ns, names[0], names[1], "--wait", "3m")
	if code != 1 || !strings.Contains(out, "ib_write_bw not found") {
		t.Errorf("kubectl rdma bw between pods without perftest: exit %d, want 1 and ib_write_bw not found:\n%s", code, out)
	}
	var writes int64
	var gbps float64
	start := time.Now()
	for attempt, port := 1, 18600; ; attempt, port = attempt+1, port+1 {
		out, code := e.kubectlRDMA(t, "bw", "-n", ns, names[0], names[1], "--image", c.perfImage, "--duration", strconv.Itoa(c.bwSeconds),
			"--port", strconv.Itoa(port), "--qp-timeout", "18", "--wait", "3m")
		t.Logf("kubectl rdma bw -n %s %s %s --image %s (attempt %d): exit %d\n%s", ns, names[0], names[1], c.perfImage, attempt, code, out)
		if code == 0 {
			var err error
			if gbps, writes, err = bwResult(out); err != nil {
				t.Fatalf("%v, want RDMA writes completed", err)
			}
			if !strings.Contains(out, "rdma-bw-") {
				t.Errorf("kubectl rdma bw --image: its output names no ephemeral container")
			}
			break
		}
		if attempt == 3 { // a starved guest's exec can miss bw's deadline
			t.Fatalf("kubectl rdma bw --image failed %d times", attempt)
		}
	}
	took := time.Since(start)
	for _, n := range names {
		err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
			p, err := e.core.Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(p.Status.EphemeralContainerStatuses) == 0 {
				return fmt.Errorf("pod %s lists no ephemeral container", n)
			}
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.State.Terminated == nil {
					return fmt.Errorf("pod %s: ephemeral container %s has not ended (%+v)", n, s.Name, s.State)
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("after kubectl rdma bw --image: %v", err)
		}
	}
	line := fmt.Sprintf("bw --image: pods without perftest, %s in ephemeral containers: %.2f Gb/sec (%d writes), bw took %.1f s; without --image: exit %d",
		c.perfImage, gbps, writes, took.Seconds(), code)
	t.Log(line)
	e.appendReport(t, line)
	for _, n := range names {
		e.deletePod(t, ns, n)
	}
}
