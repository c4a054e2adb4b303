package main

import (
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kube-rdma/kube-rdma/pkg/client/clientset"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
)

// leaseRenew is how often the simulator renews each node's Lease. A kubelet
// renews every 10 s: 5,000 nodes would be 500 writes/s, more than this
// 2-core machine gives the whole run, so the simulator renews every 2 min
// and the controller manager's grace period is 10 min (nodeGrace). KWOK
// (sigs.k8s.io/kwok) does the same job but is not among the modules this
// build may take, and a Lease loop is all it would do here.
const leaseRenew = 2 * time.Minute

// namespaces the workload pods are spread over.
const namespaces = 20

type cluster struct {
	cp    *controlPlane
	kube  kubernetes.Interface
	nodes []*simNode
	pubs  []*nodestate.Publisher
	big   map[string]bool // nodes of the 1,024-device topology
}

func nsName(i int) string { return fmt.Sprintf("team-%02d", i%namespaces) }

// parallel runs fn(0..n-1) on workers goroutines; the first error wins.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	var next atomic.Int64
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// setup makes the N nodes, their Leases, RDMANodeStates (written by one
// running publisher per node), ResourceSlices and workload pods.
func setup(ctx context.Context, cp *controlPlane, n, bigEvery, podsPerNode int, crds string) (*cluster, error) {
	kube, err := kubernetes.NewForConfig(cp.rest())
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rdma, err := clientset.NewForConfig(cp.rest())
	if err != nil {
		return nil, fmt.Errorf("kube-rdma client: %w", err)
	}
	if out, err := exec.CommandContext(ctx, cp.bin+"/kubectl", "--kubeconfig", cp.kubeconfig, "apply", "-f", crds).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apply crds: %w: %s", err, out)
	}
	hgx, err := scanTopology(nodesim.HGX())
	if err != nil {
		return nil, err
	}
	big, err := scanTopology(nodesim.Synthetic(8, 16, 63))
	if err != nil {
		return nil, err
	}
	c := &cluster{cp: cp, kube: kube, big: map[string]bool{}}
	for i := range namespaces + 1 {
		name := schedNS
		if i < namespaces {
			name = nsName(i)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create namespace: %w", err)
		}
	}
	for _, dc := range deviceClasses() {
		if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create deviceclass: %w", err)
		}
	}
	for i := range n {
		t := hgx
		name := fmt.Sprintf("gpu-node-%05d", i)
		if bigEvery > 0 && i%bigEvery == bigEvery/2 {
			t = big
			c.big[name] = true
		}
		c.nodes = append(c.nodes, newSimNode(name, t, func(int) string { return nsName(i) }, podsPerNode))
	}
	start := time.Now()
	err = parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		sn := c.nodes[i]
		node, err := kube.CoreV1().Nodes().Create(ctx, nodeObject(sn.name, i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node: %w", err)
		}
		sn.uid = node.UID
		err = retry(ctx, func() error {
			_, err := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, leaseObject(node), metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("create lease: %w", err)
		}
		_, err = sn.syncSlices(ctx, kube)
		return err
	})
	if err != nil {
		return nil, err
	}
	slog.Info("nodes, leases and slices", "nodes", n, "took", time.Since(start).Round(time.Second))
	// From here on, not after the set-up: at 5,000 nodes the pods take
	// minutes, and Leases left unrenewed that long turned 1,382 nodes
	// NotReady in a run (the controller manager then wrote their taints
	// and no DRA pod could be scheduled).
	go c.renewLeases(ctx)
	for _, sn := range c.nodes {
		sn.pacer = dra.NewPacer(dra.DefaultPublishInterval, func(ctx context.Context) error {
			_, err := sn.syncSlices(ctx, kube)
			return err
		})
		go sn.pacer.Run(ctx)
	}
	client := nodestate.NewClient(kube.CoreV1(), rdma.RDMAV1alpha1())
	for _, sn := range c.nodes {
		// Refresh off: the steady state counts the writes that changes cause. The daemon's
		// refresh (nodestate.DefaultRefresh, 5 min) is a fixed rate, one write per node per
		// 5 min, N/300 per second (docs/scale.md), and a long run would count it in its window.
		p := nodestate.New(nodestate.Config{NodeName: sn.name, Source: sn, Pods: sn, Writer: client,
			CNIMode: "chained", CNIChainedPool: rocePool, DaemonVersion: "v0.0.0-scale", Refresh: -1})
		c.pubs = append(c.pubs, p)
		go func() { _ = p.Run(ctx) }()
	}
	start = time.Now()
	err = parallel(ctx, n*podsPerNode, 8, func(ctx context.Context, i int) error {
		sn := c.nodes[i/podsPerNode]
		ns := nsName(i / podsPerNode)
		err := retry(ctx, func() error {
			_, err := kube.CoreV1().Pods(ns).Create(ctx, podObject(ns, podName(sn.name, i%podsPerNode), sn.name), metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("create pod: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slog.Info("pods", "pods", n*podsPerNode, "took", time.Since(start).Round(time.Second))
	if err := c.waitPublished(ctx, 5*time.Minute); err != nil {
		return nil, err
	}
	return c, nil
}

// waitPublished waits until every publisher has written its object.
func (c *cluster) waitPublished(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		missing := 0
		var lastErr string
		for _, p := range c.pubs {
			if r := p.Report(); r.Writes == 0 {
				missing++
				if r.LastError != "" {
					lastErr = r.LastError
				}
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d publishers have not written (last error: %s)", missing, len(c.pubs), lastErr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// renewLeases keeps every node's Lease fresh, spread over leaseRenew.
func (c *cluster) renewLeases(ctx context.Context) {
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gap := leaseRenew / 2 / time.Duration(len(c.nodes))
		_ = parallel(ctx, len(c.nodes), 1, func(ctx context.Context, i int) error {
			renew(ctx, c.kube, c.nodes[i].name)
			time.Sleep(gap)
			return nil
		})
	}
}

func renew(ctx context.Context, kube kubernetes.Interface, node string) {
	leases := kube.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		slog.Warn("get lease", "node", node, "err", err)
		return
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		slog.Warn("renew lease", "node", node, "err", err)
	}
}

// deviceClasses select the simulated GPUs and our NICs by driver.
func deviceClasses() []*resourceapi.DeviceClass {
	dc := func(name, driver string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	}
	return []*resourceapi.DeviceClass{dc("sim-gpu", gpuDriver), dc("rdma-nic", "rdma.kube-rdma.io")}
}

// retry calls create until it succeeds or finds the object there (an
// earlier try that timed out may have made it), 6 tries with backoff: an
// API server on a loaded 2-core machine loses its etcd connection now and
// then (gRPC keepalive), and one lost pod must not end a 20-minute run.
func retry(ctx context.Context, create func() error) error {
	for i := 0; ; i++ {
		err := create()
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if i == 5 || ctx.Err() != nil {
			return err
		}
		slog.Warn("create failed; trying again", "err", err, "in", time.Second<<i)
		sleep(ctx, time.Second<<i)
	}
}

// notReady counts the nodes whose Ready condition is not True: a run's
// figures hold only for Ready nodes (the report says when some were not).
func (c *cluster) notReady(ctx context.Context) (int, error) {
	l, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return 0, fmt.Errorf("list nodes: %w", err)
	}
	n := 0
	for _, node := range l.Items {
		ready := false
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			n++
		}
	}
	return n, nil
}
