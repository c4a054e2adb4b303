package suite

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// kubeletGetSample is the kubelet's count of PodResources Get requests
// (kubernetes pkg/kubelet/metrics): the CNI plugin's question "which
// devices does this pod hold". The node agent asks List, never Get.
const kubeletGetSample = `kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"}`

// testPlainPodNoKubeletCall: on a node whose primary network chains the
// kube-rdma entry, a pod without RDMA costs no PodResources call (the
// plugin reads the kubelet's device checkpoint), while a pod with a device
// of the chained pool is asked for (the counter does count the plugin's
// calls). The kubelet's own counter, read through the API server, is the
// measure.
func testPlainPodNoKubeletCall(t *testing.T, e *env) {
	p := e.pool(e.chainedPool)
	if p == nil || p.count == 0 {
		t.Skip("the phase has no chained pool with devices")
	}
	ns := e.namespace(t)
	run := func(name, pool string, n int64) float64 {
		before := e.kubeletSample(t, kubeletGetSample)
		e.createPod(t, e.devicePod(ns, name, pool, n))
		e.waitRunning(t, ns, name)
		after := e.kubeletSample(t, kubeletGetSample)
		e.deletePod(t, ns, name)
		return after - before
	}
	plain := run("plain", "", 0)
	withDevice := run("with-"+dnsName(p.name), p.name, 1)
	line := fmt.Sprintf("kubelet PodResources Get calls per pod start, chained pool %s: pod without RDMA %v, pod with a device %v",
		p.name, plain, withDevice)
	t.Log(line)
	e.appendReport(t, line)
	if plain != 0 {
		t.Errorf("a pod without RDMA cost %v PodResources Get calls, want 0", plain)
	}
	if withDevice < 1 {
		t.Errorf("a pod with a device of %s cost %v PodResources Get calls, want at least 1 (does the kubelet serve Get?)", p.name, withDevice)
	}
}

// kubeletSample is the value of a sample of the node's kubelet's /metrics,
// read through the API server's node proxy; 0 when the kubelet has none yet.
func (e *env) kubeletSample(t *testing.T, sample string) float64 {
	t.Helper()
	var v float64
	err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		b, err := e.core.RESTClient().Get().AbsPath("/api/v1/nodes", e.node, "proxy", "metrics").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("kubelet metrics of node %s: %w", e.node, err)
		}
		v = 0
		for l := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(l, sample+" "); ok {
				v, err = strconv.ParseFloat(strings.TrimSpace(rest), 64)
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}
