package cni

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestDeviceInNoPoolRefused: a deviceID (by RDMA name or PCI address) whose
// device is in no pool of the node's pools file is refused, code 102, with
// the device and the file in the message, before anything changes; a
// member of a pool is attached.
func TestDeviceInNoPoolRefused(t *testing.T) {
	e := newEnv(t, 2, false, "shared")
	e.writePools(nodepools.File{Pools: []nodepools.Pool{{Name: "rdma", Mode: "exclusive", Frontend: "devicePlugin",
		Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr(0)}}}}})
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	for _, id := range []string{"mlx5_1", pciAddr(1), strings.ToUpper(pciAddr(1))} {
		_, err := e.p.Add(context.Background(), args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+id+`"}`)))
		if cniCode(err) != CodeNotAllocated || !strings.Contains(err.Error(), "is in no pool of this node") ||
			!strings.Contains(err.Error(), pciAddr(1)) || !strings.Contains(err.Error(), nodepools.Path(e.allocDir)) {
			t.Errorf("ADD of %s = %v (code %d), want %d naming the device, its PCI address and the pools file", id, err, cniCode(err), CodeNotAllocated)
		}
		if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
			t.Errorf("ADD of %s changed the host (-before +after):\n%s", id, diff)
		}
	}
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+pciAddr(0)+`"}`))
	mustAdd(t, e, a)
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// TestPoolsFileMissingOrNewer: without the node's pools file, a deviceID
// is refused (50, naming the file and what to do) when the node requires
// the kubelet's confirmation, and attached with a warning when it does
// not; a pools file of a newer version is refused (50) naming both
// versions.
func TestPoolsFileMissingOrNewer(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	if err := os.Remove(nodepools.Path(e.allocDir)); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(pod)
	req := args("c1", pod, "net1", e.conf("1.1.0", `"requirePodResources":true,"runtimeConfig":{"deviceID":"mlx5_0"}`))
	req.Args = "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=trainer-0"
	_, err := e.p.Add(context.Background(), req)
	if cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), nodepools.Path(e.allocDir)+" does not exist") ||
		!strings.Contains(err.Error(), "has not published this node's pools") {
		t.Errorf("ADD without a pools file, required = %v (code %d), want 50 naming the file", err, cniCode(err))
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("refused ADD changed the host (-before +after):\n%s", diff)
	}

	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	if !strings.Contains(logs.String(), "level=WARN msg=\"no pools file; deviceID not checked against the node's pools\"") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}

	if err := nodepools.Write(nodepools.Path(e.allocDir), []byte(`{"version":2,"pools":[]}`)); err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Add(context.Background(), a)
	if cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "version 2 is newer than this kube-rdma reads (1)") {
		t.Errorf("ADD with a pools file of version 2 = %v (code %d), want 50 naming both versions", err, cniCode(err))
	}
}
