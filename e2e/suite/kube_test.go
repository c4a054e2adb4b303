package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// podStartup bounds a pod's way from creation to Running and Ready: 2 min, and 5 min on the
// rxe-cluster harness (TestCluster), whose TCG guests (one vCPU each, sharing the host's two
// cores with the control plane) can take over 2 min to start one: the CNI ADD alone 11 s and
// containerd's calls to its shim timing out. A deadline, not a figure: passing runs are no
// slower.
var podStartup = 2 * time.Minute

const (
	pollInterval = 500 * time.Millisecond
	// podGone bounds a deleted pod's way out: the kubelet stops its containers and runs the
	// CNI DEL. A starved soft-RoCE guest's containerd can miss the kubelet's KillContainer
	// deadline for minutes (a pod can take 3 min to start there): a deadline, not a figure,
	// so passing runs are no slower.
	podGone  = 5 * time.Minute
	podLabel = "kube-rdma-e2e"
)

// eventually calls check until it returns nil, or timeout passes; then it
// returns check's last error. A call begun just before the deadline may run
// past it (its context has some slack), so that the last error says what was
// wrong rather than that time ran out.
func eventually(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	cctx, cancel := context.WithDeadline(ctx, deadline.Add(30*time.Second))
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := check(cctx)
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("not within %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// namespace creates kube-rdma-e2e-<random> and deletes it, waiting until it
// is gone, when t ends.
func (e *env) namespace(t *testing.T) string {
	t.Helper()
	ns, err := e.core.Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: "kube-rdma-e2e-", Labels: map[string]string{podLabel: "true"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	name := ns.Name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := e.core.Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete namespace %s: %v", name, err)
			return
		}
		err := eventually(ctx, 3*time.Minute, func(ctx context.Context) error {
			_, err := e.core.Namespaces().Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("namespace %s still there (%v)", name, err)
		})
		if err != nil {
			t.Errorf("delete namespace: %v", err)
		}
	})
	return name
}

// devicePod is a pod pinned to the node that asks for n devices of pool and
// runs podScript (pool "" asks for nothing).
func (e *env) devicePod(ns, name, pool string, n int64) *corev1.Pod {
	c := corev1.Container{
		Name:            "test",
		Image:           e.image,
		ImagePullPolicy: e.pullPolicy,
		Command:         []string{"sh", "-c", podScript},
	}
	if pool != "" {
		c.Resources.Limits = corev1.ResourceList{e.resource(pool): *resource.NewQuantity(n, resource.DecimalSI)}
	}
	grace := int64(5) // the script exits on SIGTERM; this bounds it
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{podLabel: name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{hostnameLabel: e.hostname},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{c},
		},
	}
}

// createPod creates pod and, if t fails, prints its status, events and logs.
func (e *env) createPod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := e.core.Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpPod(t, pod.Namespace, pod.Name)
		}
	})
}

// waitRunning waits until the pod is Running and Ready, failing fast when it
// ends.
func (e *env) waitRunning(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := eventually(t.Context(), podStartup, func(ctx context.Context) error {
		p, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		switch {
		case p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded:
			return nil // reported below, no use waiting
		case p.Status.Phase != corev1.PodRunning || !podReady(p):
			return fmt.Errorf("pod %s: phase %s, ready %v", name, p.Status.Phase, podReady(p))
		}
		return nil
	})
	if err == nil && pod.Status.Phase != corev1.PodRunning {
		err = fmt.Errorf("pod %s ended: phase %s", name, pod.Status.Phase)
	}
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

func condition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	c := condition(p, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// container returns the status of the pod's only container.
func container(p *corev1.Pod) corev1.ContainerStatus {
	if len(p.Status.ContainerStatuses) == 0 {
		return corev1.ContainerStatus{}
	}
	return p.Status.ContainerStatuses[0]
}

// deletePod deletes the pod and waits until the API no longer has it.
func (e *env) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := e.core.Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	err := eventually(t.Context(), podGone, func(ctx context.Context) error {
		_, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// logs returns the pod's log.
func (e *env) logs(ctx context.Context, ns, name string) (string, error) {
	b, err := e.core.Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of pod %s: %w", name, err)
	}
	return string(b), nil
}

// waitLog waits until the pod's log has its environment and at least ticks
// tick lines, and returns it parsed.
func (e *env) waitLog(t *testing.T, ns, name string, ticks int) podLog {
	t.Helper()
	var l podLog
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		s, err := e.logs(ctx, ns, name)
		if err != nil {
			return err
		}
		l = parseLog(s)
		if l.env == nil || len(l.ticks) < ticks {
			return fmt.Errorf("pod %s: log has %d tick lines, env %v; want %d", name, len(l.ticks), l.env != nil, ticks)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// dumpPod prints what explains a pod's failure: status, events, log.
func (e *env) dumpPod(t *testing.T, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Logf("pod %s/%s: %v", ns, name, err)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s on %q: phase %s, reason %q, message %q\n", ns, name, p.Spec.NodeName,
		p.Status.Phase, p.Status.Reason, p.Status.Message)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "  condition %s=%s reason %q message %q at %s\n", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime)
	}
	for _, c := range p.Status.ContainerStatuses {
		fmt.Fprintf(&b, "  container %s: id %s, restarts %d, state %s\n", c.Name, c.ContainerID, c.RestartCount, stateString(c.State))
	}
	ev, err := e.core.Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
	} else {
		slices.SortFunc(ev.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
		for _, v := range ev.Items {
			by := v.Source.Component
			if by == "" {
				by = v.ReportingController
			}
			fmt.Fprintf(&b, "  event %s %s %s by %s: %s\n", eventTime(v).Format(time.TimeOnly), v.Type, v.Reason, by, v.Message)
		}
	}
	if s, err := e.logs(ctx, ns, name); err != nil {
		fmt.Fprintf(&b, "  log: %v\n", err)
	} else {
		fmt.Fprintf(&b, "  log:\n%s", indent(s, "    | "))
	}
	t.Log(b.String())
}

// eventTime is when an event last happened: events written through the
// events.k8s.io API have only EventTime.
func eventTime(v corev1.Event) time.Time {
	if !v.LastTimestamp.IsZero() {
		return v.LastTimestamp.Time
	}
	return v.EventTime.Time
}

func stateString(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.String()
	case s.Waiting != nil:
		return fmt.Sprintf("waiting: %s %s", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated: exit %d %s %s", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "unknown"
}

func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		b.WriteString(prefix + line)
	}
	if s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteByte('\n')
	}
	return b.String()
}

// nodeResources returns the node's allocatable (or capacity) value of every
// pool resource; a resource the node does not list is -1.
func (e *env) nodeResources(ctx context.Context, capacity bool, pools ...string) (map[string]int64, error) {
	n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", e.node, err)
	}
	list := n.Status.Allocatable
	if capacity {
		list = n.Status.Capacity
	}
	out := map[string]int64{}
	for _, p := range pools {
		q, ok := list[e.resource(p)]
		out[p] = -1
		if ok {
			out[p] = q.Value()
		}
	}
	return out, nil
}

// counts is the phase's pools as a map from pool to expected allocatable.
func (e *env) counts() map[string]int64 {
	m := map[string]int64{}
	for _, p := range e.pools {
		m[p.name] = p.count
	}
	return m
}

func poolNames(m map[string]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// waitAllocatable waits until the node's allocatable has want (pool ->
// value; -1: absent).
func (e *env) waitAllocatable(ctx context.Context, timeout time.Duration, want map[string]int64) error {
	return eventually(ctx, timeout, func(ctx context.Context) error {
		got, err := e.nodeResources(ctx, false, poolNames(want)...)
		if err != nil {
			return err
		}
		if !mapsEqual(want, got) {
			return fmt.Errorf("node %s allocatable %s, want %s", e.node, fmtCounts(got), fmtCounts(want))
		}
		return nil
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// fmtCounts prints pool values in name order, "absent" for -1.
func fmtCounts(m map[string]int64) string {
	var parts []string
	for _, k := range poolNames(m) {
		v := fmt.Sprint(m[k])
		if m[k] < 0 {
			v = "absent"
		}
		parts = append(parts, k+"="+v)
	}
	return "{" + strings.Join(parts, " ") + "}"
}
