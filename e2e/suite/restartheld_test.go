package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// testRestartHeld: the node's daemon restarted (its pod deleted, as an upgrade, an eviction
// or a crash loop's restart does) while a pod holds a device of the chained pool. The node's
// allocatable and its RDMANodeState keep the device and the pod's allocation, the pod is
// untouched, and then the pod's container, restarted (its first process ends), comes back
// with the same device nodes, netdevs and RDMA devices: the CDI device its container names
// still resolves. In the exclusive RDMA netns mode the device sits in the pod's network
// namespace all along, where a daemon that starts cannot see it.
func testRestartHeld(t *testing.T, e *env) {
	e.needHelm(t)
	ns := e.namespace(t)
	p := e.devicePool(t)
	w := e.startWatchedPod(t, ns)
	devs := e.waitLog(t, ns, w.name, 1).env["KUBE_RDMA_"+envName(p.name)+"_RDMA_DEVICES"]
	if devs == "" {
		t.Fatalf("pod %s: no KUBE_RDMA_%s_RDMA_DEVICES", w.name, envName(p.name))
	}
	ex, err := kubectlrdma.NewExecer(kubeconfigFlags())
	if err != nil {
		t.Fatal(err)
	}
	ibBefore := podRDMADevices(t, ex, ns, w.name)
	for _, d := range strings.Split(devs, ",") {
		if !slices.Contains(ibBefore, d) {
			t.Fatalf("pod %s sees RDMA devices %v, not its %s", w.name, ibBefore, d)
		}
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatalf("before the restart: %v", err)
	}

	old, err := e.daemonPodOn(t.Context(), e.node)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.core.Pods(old.Namespace).Delete(t.Context(), old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the daemon's pod %s: %v", old.Name, err)
	}
	var ready time.Duration
	err = eventually(t.Context(), rxeInstallTimeout, func(ctx context.Context) error {
		p, err := e.daemonPodOn(ctx, e.node)
		if err != nil {
			return err
		}
		if p.UID == old.UID || !podReady(p) {
			return fmt.Errorf("the daemon's new pod on %s is not Ready yet (%s %s)", e.node, p.Name, p.Status.Phase)
		}
		ready = time.Since(start)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The new daemon's pools, as the kubelet and the API show them: every device, the held
	// one included, and the pod's allocation; held for a few of the node state's write
	// intervals so that what the old daemon wrote cannot pass for the new one's.
	if err := e.waitAllocatable(t.Context(), 2*time.Minute, e.counts()); err != nil {
		t.Fatalf("after the daemon's restart: %v", err)
	}
	var state *v1alpha1.RDMANodeState
	for i := range 4 {
		if i > 0 {
			time.Sleep(3 * time.Second)
		}
		if err := e.waitAllocatable(t.Context(), time.Second, e.counts()); err != nil {
			t.Fatalf("after the daemon's restart, %d s after its new pod was Ready: %v", 3*i, err)
		}
		state = e.waitNodeState(t, "the held device and its allocation after the daemon's restart", func(s *v1alpha1.RDMANodeState) error {
			for _, d := range strings.Split(devs, ",") {
				if !slices.ContainsFunc(s.Status.Devices, func(x v1alpha1.Device) bool { return x.Name == d }) {
					return fmt.Errorf("device %s not listed", d)
				}
			}
			if !slices.ContainsFunc(s.Status.Allocations, func(a v1alpha1.Allocation) bool {
				return a.Namespace == ns && a.Pod == w.name && strings.Join(a.RDMADevices, ",") == devs
			}) {
				return fmt.Errorf("no allocation of %s to %s/%s", devs, ns, w.name)
			}
			return nil
		})
	}
	w.checkIntact(t)
	allocatable := time.Since(start)

	// The container's first process ends; the kubelet starts the container again, which
	// the runtime makes from the same CDI devices.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	_, _ = ex.Exec(ctx, ns, w.name, "test", []string{"kill", "1"}) // the exec may end with the container
	cancel()
	var cs corev1.ContainerStatus
	err = eventually(t.Context(), podStartup, func(ctx context.Context) error {
		pod, err := e.core.Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cs = container(pod)
		if cs.RestartCount < 1 || cs.State.Running == nil || cs.ContainerID == w.containerID {
			return fmt.Errorf("pod %s: container %s, %d restarts, %s", w.name, cs.ContainerID, cs.RestartCount, stateString(cs.State))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the container's restart after the daemon's: %v", err)
	}
	again := e.waitLog(t, ns, w.name, 1).ticks[0]
	if !slices.Equal(again.dev, w.first.dev) {
		t.Errorf("restarted container: /dev/infiniband %v, the first had %v", again.dev, w.first.dev)
	}
	if w.chained && !slices.Equal(again.links, w.first.links) {
		t.Errorf("restarted container: links %v, the first had %v", again.links, w.first.links)
	}
	if ibAfter := podRDMADevices(t, ex, ns, w.name); !slices.Equal(ibAfter, ibBefore) {
		t.Errorf("restarted container: RDMA devices %v, the first saw %v", ibAfter, ibBefore)
	}
	t.Logf("daemon on %s restarted while pod %s held %s (netns mode %s): new daemon Ready %.1f s after its old pod's deletion, allocatable and node state (%d devices) unchanged by %.1f s; the pod's container restarted (restart %d) with %v, links %v, RDMA devices %v",
		e.node, w.name, devs, state.Status.RDMANetnsMode, ready.Seconds(), len(state.Status.Devices), allocatable.Seconds(), cs.RestartCount, again.dev, again.links, ibBefore)
	e.deletePod(t, ns, w.name)
	if err := e.waitAllocatable(t.Context(), 2*time.Minute, e.counts()); err != nil {
		t.Fatalf("after the pod's deletion: %v", err)
	}
}

// daemonPodOn is the release's daemon pod on node (the newest, when an old one is still
// terminating).
func (e *env) daemonPodOn(ctx context.Context, node string) (*corev1.Pod, error) {
	ds, err := e.releaseDaemonSet(ctx)
	if err != nil {
		return nil, err
	}
	pods, err := e.core.Pods(ds.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector), FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("list the daemon's pods on %s: %w", node, err)
	}
	var newest *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		if newest == nil || p.CreationTimestamp.After(newest.CreationTimestamp.Time) {
			newest = p
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("no daemon pod of %s/%s on %s", ds.Namespace, ds.Name, node)
	}
	return newest, nil
}

// podRDMADevices lists /sys/class/infiniband in the pod's container: the RDMA devices of its
// network namespace in the exclusive RDMA netns mode, every device in the shared one.
func podRDMADevices(t *testing.T, ex interface {
	Exec(ctx context.Context, ns, pod, container string, cmd []string) (string, error)
}, ns, pod string) []string {
	t.Helper()
	var out string
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		var err error
		out, err = ex.Exec(ctx, ns, pod, "test", []string{"ls", "-1", "/sys/class/infiniband"})
		return err
	})
	if err != nil {
		t.Fatalf("ls /sys/class/infiniband in %s: %v", pod, err)
	}
	return strings.Fields(out)
}
