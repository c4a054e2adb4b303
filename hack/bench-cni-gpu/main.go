// Command bench-cni-gpu is the GPU-aligned arm's node for hack/bench-cni.sh:
// it writes a sysfs and procfs tree (nodesim) and a gpuAligned pool's
// pool.json, then serves the kubelet's v1 PodResourcesLister on a unix
// socket (podrestest's real grpc-go server) for one pod until SIGTERM,
// SIGINT or -timeout.
//
//	bench-cni-gpu -root DIR -alloc-dir DIR -socket PATH [-timeout 30m]
//
// The node: two PCIe switches on two host bridges (NUMA 0 and 1), each with
// an A100 and a ConnectX-6 Dx RoCE PF: GPU0 and mlx5_0 (netdev bench1) on
// the first, GPU1 and mlx5_1 (netdev bench0) on the second. The pool
// "bench-gpu" (resource rdma.kube-rdma.io/bench-gpu) holds both NICs. The
// pod bench/bench-pod has one slot of the pool and GPU1, so the binding
// must choose mlx5_1, PIX to GPU1, and not the pool's first member.
//
// Once the socket listens it prints, one "key value" per line: sys, proc
// (the roots for the netconf), resource, gpuResource, namespace, pod, nic
// (the RDMA device the binding must choose), netdev (its netdev), gpu (the
// pod's GPU UUID), then "ready".
//
// It is bench tooling: no shipped binary links nodesim or podrestest
// (cmd/device-plugin/deps_test.go).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

const (
	pool        = "bench-gpu"
	resource    = "rdma.kube-rdma.io/bench-gpu"
	gpuResource = "nvidia.com/gpu"
	namespace   = "bench"
	podName     = "bench-pod"
)

func main() {
	root := flag.String("root", "", "directory to write sys/ and proc/ into (must not exist)")
	allocDir := flag.String("alloc-dir", "", "the CNI's allocDir: pool.json goes to <alloc-dir>/"+pool+"/")
	socket := flag.String("socket", "", "unix socket to serve PodResources on")
	timeout := flag.Duration("timeout", 30*time.Minute, "exit after this long even if not signalled")
	flag.Parse()
	if *root == "" || *allocDir == "" || *socket == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: bench-cni-gpu -root DIR -alloc-dir DIR -socket PATH [-timeout D]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := run(ctx, *root, *allocDir, *socket); err != nil {
		fmt.Fprintln(os.Stderr, "bench-cni-gpu:", err)
		os.Exit(1)
	}
}

// nic is one switch's NIC and GPU.
type nic struct {
	rdma, netdev string
	hostBridge   int
	gpuUUID      string
}

var nics = []nic{
	{rdma: "mlx5_0", netdev: "bench1", hostBridge: 0x10, gpuUUID: "GPU-5a3fbe00-1c2d-4e5f-8a9b-c0ffeebe0000"},
	{rdma: "mlx5_1", netdev: "bench0", hostBridge: 0x30, gpuUUID: "GPU-5a3fbe01-1c2d-4e5f-8a9b-c0ffeebe0001"},
}

// chosen is the NIC the pod's GPU (chosen's GPU) must get.
const chosen = 1

func run(ctx context.Context, root, allocDir, socket string) error {
	if _, err := os.Stat(root); err == nil {
		return fmt.Errorf("%s exists", root)
	}
	tree, err := nodesim.Build(root, topology())
	if err != nil {
		return err
	}
	var members []string
	for _, n := range nics {
		members = append(members, n.rdma)
	}
	pf := allocdir.PoolFile{Pool: pool, Resource: resource, Binding: allocdir.BindingGPUAligned, Members: members, Healthy: members}
	b, err := pf.Marshal()
	if err != nil {
		return err
	}
	if err := allocdir.WritePoolFile(allocDir, pool, b); err != nil {
		return err
	}

	// podrestest.Start wants a testing.TB; the server itself is a plain
	// PodResourcesLister, served here the way Start serves it.
	srv := &podrestest.Server{Socket: socket}
	srv.SetPods(podrestest.Pod{Namespace: namespace, Name: podName, Devices: map[string][]string{
		resource:    {allocdir.SlotID(pool, 0)},
		gpuResource: {nics[chosen].gpuUUID},
	}})
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return fmt.Errorf("make socket dir: %w", err)
	}
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, srv)
	served := make(chan error, 1)
	go func() { served <- g.Serve(l) }()

	fmt.Printf("sys %s\nproc %s\nresource %s\ngpuResource %s\nnamespace %s\npod %s\nnic %s\nnetdev %s\ngpu %s\nready\n",
		tree.SysRoot, tree.ProcRoot, resource, gpuResource, namespace, podName, nics[chosen].rdma, nics[chosen].netdev, nics[chosen].gpuUUID)

	select {
	case err := <-served:
		return fmt.Errorf("serve podresources: %w", err)
	case <-ctx.Done():
		g.Stop()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("still running after -timeout: %w", ctx.Err())
		}
		return nil
	}
}

// topology is the node of the package comment, in the kernel's layout:
// host bridge -> root port -> switch upstream port -> downstream ports 0
// (the GPU) and 1 (the NIC).
func topology() nodesim.Topology {
	t := nodesim.Topology{Name: "bench-cni-gpu", NUMANodes: 2}
	for i, n := range nics {
		hb := n.hostBridge
		sw := fmt.Sprintf("pci0000:%02x/0000:%02x:01.0/0000:%02x:00.0", hb, hb, hb+1)
		gpu := fmt.Sprintf("0000:%02x:00.0", hb+3)
		pf := fmt.Sprintf("0000:%02x:00.0", hb+4)
		t.PCI = append(t.PCI,
			nodesim.Function{Path: fmt.Sprintf("%s/0000:%02x:00.0/%s", sw, hb+2, gpu), Vendor: "10de", Device: "20b0",
				Class: "030200", Driver: "nvidia", NUMANode: i, UUID: n.gpuUUID, Minor: i},
			nodesim.Function{Path: fmt.Sprintf("%s/0000:%02x:01.0/%s", sw, hb+2, pf), Vendor: "15b3", Device: "101d",
				Class: "020000", Driver: "mlx5_core", NUMANode: i, Netdevs: []nodesim.Netdev{{Name: n.netdev}}})
		t.RDMA = append(t.RDMA, nodesim.RDMA{Name: n.rdma, Parent: pf, NodeGUID: fmt.Sprintf("b859:9f03:00be:%04x", i),
			Ports: []nodesim.Port{rocePort(n.netdev, byte(i))}})
	}
	return t
}

// rocePort is an active RoCE port with mlx5's GID table for one IPv4
// address: link-local v1/v2 at 0/1, IPv4-mapped v1/v2 at 2/3 (so nccl.conf
// gets NCCL_IB_GID_INDEX=3, as on a real node).
func rocePort(netdev string, host byte) nodesim.Port {
	ll := fmt.Sprintf("fe80:0000:0000:0000:0a01:00ff:fe00:%04x", host)
	v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a01:%04x", host)
	return nodesim.Port{State: nodesim.StateActive, PhysState: nodesim.PhysLinkUp, LinkLayer: "Ethernet", Rate: "200 Gb/sec (2X HDR)",
		GIDs: []nodesim.GID{
			{Index: 0, GID: ll, Type: "IB/RoCE v1", Netdev: netdev},
			{Index: 1, GID: ll, Type: "RoCE v2", Netdev: netdev},
			{Index: 2, GID: v4, Type: "IB/RoCE v1", Netdev: netdev},
			{Index: 3, GID: v4, Type: "RoCE v2", Netdev: netdev},
		}}
}
