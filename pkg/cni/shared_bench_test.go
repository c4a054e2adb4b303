package cni

import (
	"context"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// BenchmarkSharedVsMoved times ADD+DEL (no IPAM) of a macvlan child of a
// shared pool's NIC against ADD+DEL of the same NIC moved into the pod
// (deviceID of an exclusive pool), in the same host and pod namespaces, and
// reports both per-op times and their ratio (child/moved).
//
//	go test -run '^$' -bench SharedVsMoved -benchtime 200x ./pkg/cni/
func BenchmarkSharedVsMoved(b *testing.B) {
	var child, moved time.Duration
	e := newEnv(b, 2, false, "shared")
	e.writePools(nodepools.File{Pools: []nodepools.Pool{
		{Name: "roce", Mode: nodepools.ModeShared, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr(0)}}},
		{Name: "excl", Mode: nodepools.ModeExclusive, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_1", PCIAddress: pciAddr(1)}}},
	}})
	e.socket = podrestest.Start(b, podrestest.Pod{Namespace: "ns", Name: "a", Devices: map[string][]string{
		"rdma.kube-rdma.io/roce": {nodepools.SlotID("roce", 0)}, "rdma.kube-rdma.io/excl": {"mlx5_1"}}}).Socket
	pod := netnstest.New(b)
	// Both ask the kubelet and read the pools file: the difference is the
	// child's create and delete against the netdev's two moves.
	ca := args("c1", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan"`))
	ca.Args = podArgsOf("a")
	ma := args("c2", pod, "net9", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`))
	ma.Args = podArgsOf("a")
	ctx := context.Background()
	for b.Loop() {
		start := time.Now()
		if _, err := e.p.Add(ctx, ca); err != nil {
			b.Fatal(err)
		}
		if err := e.p.Del(ctx, ca); err != nil {
			b.Fatal(err)
		}
		child += time.Since(start)
		start = time.Now()
		if _, err := e.p.Add(ctx, ma); err != nil {
			b.Fatal(err)
		}
		if err := e.p.Del(ctx, ma); err != nil {
			b.Fatal(err)
		}
		moved += time.Since(start)
	}
	n := float64(b.N)
	b.ReportMetric(float64(child.Microseconds())/n, "child-us/op")
	b.ReportMetric(float64(moved.Microseconds())/n, "moved-us/op")
	b.ReportMetric(float64(child)/float64(moved), "child/moved")
}
