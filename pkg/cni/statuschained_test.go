package cni

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// TestStatusChainedRDMADown: the chained entry (resourceName) of a node
// whose RDMA netlink does not answer (a driver container reloading the
// RDMA stack; the fake RDMA fails, as this kernel has none) and whose state
// dir cannot be written. STATUS succeeds, so a runtime that turns STATUS
// into the node's network readiness keeps the node Ready; the log warns and
// the operation's record says code 50 for the daemon's metric. A pod
// without RDMA passes through meanwhile. The same node without the kubelet
// still fails STATUS (a pod without RDMA needs its answer), and a Multus
// (deviceID) entry, which no runtime asks for readiness, still fails on
// RDMA netlink. Before, every one of these failed with code 50.
func TestStatusChainedRDMADown(t *testing.T) {
	e := newEnv(t, 1, false, "exclusive")
	srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "plain", Devices: map[string][]string{"nvidia.com/gpu": {"GPU-0"}}})
	e.socket = srv.Socket
	e.rdma.fail = func(m string, _ netns.NsHandle) error {
		if m == "NetnsMode" {
			return errInjected
		}
		return nil
	}
	ctx := context.Background()
	chained := e.conf("1.1.0", `"resourceName":"rdma/hca"`)
	// The state dir is a file's child: not writable.
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := e.stateDir
	e.stateDir = filepath.Join(notDir, "state")
	chainedNoState := e.conf("1.1.0", `"resourceName":"rdma/hca"`)
	e.stateDir = stateDir
	_ = e.conf("1.1.0", "") // the env's node again

	for name, conf := range map[string][]byte{"rdma netlink down": chained, "rdma netlink down, state dir unusable": chainedNoState} {
		var logs bytes.Buffer
		e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
		e.p.statusDegraded.Store(0)
		if err := e.p.Status(ctx, args("", nil, "", conf)); err != nil {
			t.Errorf("%s: chained STATUS = %v, want success", name, err)
		}
		if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "rdma netlink") {
			t.Errorf("%s: no warning naming rdma netlink:\n%s", name, logs.String())
		}
		if got := e.p.statusDegraded.Load(); got != uint32(types.ErrPluginNotAvailable) {
			t.Errorf("%s: the operation's code = %d, want %d for the metric", name, got, types.ErrPluginNotAvailable)
		}
	}
	// The metric's record, as Main leaves it.
	e.p.Node.StateDir = e.stateDir
	e.p.recordOp("STATUS", nil, time.Millisecond)
	var codes []uint
	for range 2 { // Drain reads what its previous call moved aside
		if _, err := cniops.Drain(cniops.Dir(e.stateDir), func(r cniops.Record) { codes = append(codes, r.Code) }); err != nil {
			t.Fatal(err)
		}
	}
	if len(codes) != 1 || codes[0] != types.ErrPluginNotAvailable {
		t.Errorf("operation records' codes = %v, want [50]", codes)
	}

	// A pod without RDMA passes through while RDMA netlink is down.
	prev := `"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}],"ips":[{"address":"10.0.0.5/24","interface":0}]}`
	pod := netnstest.New(t)
	a := args("c-plain", pod, "eth0", e.conf("1.0.0", `"resourceName":"rdma/hca",`+prev))
	a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=plain"
	res, err := e.p.Add(ctx, a)
	if err != nil || len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" {
		t.Errorf("ADD of a pod without RDMA while RDMA netlink is down = %+v, %v; want prevResult", res, err)
	}

	// What a pod without RDMA needs: the kubelet's answer.
	srv.Stop()
	if err := e.p.Status(ctx, args("", nil, "", chained)); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("chained STATUS without the kubelet = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
	// Not chained: unchanged.
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", ""))); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS of a deviceID entry without rdma netlink = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
}
