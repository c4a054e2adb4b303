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
)

// testAllocatable: the node advertises every pool of the phase at its count.
func testAllocatable(t *testing.T, e *env) {
	if len(e.pools) == 0 {
		t.Fatal("the phase expects no pools")
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatal(err)
	}
}

// testPodWithDevices: a pod given devices of each exclusive pool sees exactly
// those device nodes, the environment naming them and, for the chained pool,
// their netdevs, which leave the host while it runs and come back after. A pod
// given one slot of a shared pool sees every device of that pool, and the
// environment names as many devices as it has uverbs nodes.
func testPodWithDevices(t *testing.T, e *env) {
	pools := e.exclusivePools()
	if len(pools) == 0 {
		t.Skip("the phase has no exclusive pool with devices")
	}
	ns := e.namespace(t)
	for _, p := range pools {
		t.Run(fmt.Sprintf("%s-1", p.name), func(t *testing.T) { e.checkDevicePod(t, ns, p, 1) })
	}
	for _, p := range e.pools {
		if p.mode == "shared" && p.count > 0 {
			t.Run(fmt.Sprintf("%s-1", p.name), func(t *testing.T) { e.checkSharedPod(t, ns, p) })
		}
	}
	if p := e.pool(e.chainedPool); p != nil {
		t.Run(fmt.Sprintf("%s-2", p.name), func(t *testing.T) {
			if p.count < 2 {
				t.Skipf("chained pool %s has %d devices, want 2", p.name, p.count)
			}
			e.checkDevicePod(t, ns, *p, 2)
		})
	}
}

// runDevicePod starts a pod asking for n devices of p, waits for its first
// log line and logs what it got.
func (e *env) runDevicePod(t *testing.T, ns string, p pool, n int) (string, podLog) {
	name := fmt.Sprintf("%s-%d", dnsName(p.name), n)
	e.createPod(t, e.devicePod(ns, name, p.name, int64(n)))
	e.waitRunning(t, ns, name)
	l := e.waitLog(t, ns, name, 1)
	key := "KUBE_RDMA_" + envName(p.name) + "_RDMA_DEVICES"
	t.Logf("pod %s: %s=%s, /dev/infiniband %v, links %v", name, key, l.env[key], l.ticks[0].dev, l.ticks[0].links)
	return name, l
}

// checkSharedPod runs a pod with one slot of shared pool p: it gets the
// pool's whole device set, so the device count comes from what it sees.
func (e *env) checkSharedPod(t *testing.T, ns string, p pool) {
	name, l := e.runDevicePod(t, ns, p, 1)
	uverbs := 0
	for _, d := range l.ticks[0].dev {
		if strings.HasPrefix(d, "uverbs") {
			uverbs++
		}
	}
	problems := deviceProblems(l.ticks[0].dev, max(uverbs, 1))
	problems = append(problems, envProblems(l.env, p.name, max(uverbs, 1), e.nccl(p.name))...)
	for _, s := range problems {
		t.Error(s)
	}
	e.deletePod(t, ns, name)
}

// checkDevicePod runs a pod with n devices of p, checks what it got, deletes
// it, and for the chained pool checks the host's links before, during, after.
func (e *env) checkDevicePod(t *testing.T, ns string, p pool, n int) {
	chained := p.name == e.chainedPool
	hostLinks := chained && e.hook != ""
	if chained && !hostLinks {
		t.Log("E2E_NODE_HOOK unset: the host's links are not checked")
	}
	var before []string
	if hostLinks {
		var err error
		if before, err = e.hookLines(t.Context(), "links"); err != nil {
			t.Fatal(err)
		}
	}
	name, l := e.runDevicePod(t, ns, p, n)
	problems := deviceProblems(l.ticks[0].dev, n)
	problems = append(problems, envProblems(l.env, p.name, n, e.nccl(p.name))...)
	if chained {
		problems = append(problems, netdevProblems(l.ticks[0].links, n)...)
	}
	if hostLinks {
		during, err := e.hookLines(t.Context(), "links")
		if err != nil {
			t.Fatal(err)
		}
		if lost := minus(before, during); len(lost) != n {
			problems = append(problems, fmt.Sprintf("the host lost links %v while the pod runs, want %d", lost, n))
		}
	}
	for _, s := range problems {
		t.Error(s)
	}
	e.deletePod(t, ns, name)
	if !hostLinks {
		return
	}
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		after, err := e.hookLines(ctx, "links")
		if err != nil {
			return err
		}
		if !slices.Equal(before, after) {
			return fmt.Errorf("host links after the pod: missing %v, new %v", minus(before, after), minus(after, before))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// testPending: a pod asking one more device than an exclusive pool has is not
// scheduled, and the scheduler says which resource is short.
func testPending(t *testing.T, e *env) {
	pools := e.exclusivePools()
	if len(pools) == 0 {
		t.Skip("the phase has no exclusive pool with devices")
	}
	ns := e.namespace(t)
	for _, p := range pools {
		e.createPod(t, e.devicePod(ns, "too-many-"+dnsName(p.name), p.name, p.count+1))
	}
	for _, p := range pools {
		t.Run(p.name, func(t *testing.T) {
			name := "too-many-" + dnsName(p.name)
			want := "Insufficient " + string(e.resource(p.name))
			err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
				pod, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				return unschedulable(pod, want)
			})
			if err != nil {
				t.Fatal(err)
			}
			// It stays so: the scheduler retries and must keep failing.
			if err := e.staysPending(t.Context(), ns, name, 5*time.Second); err != nil {
				t.Error(err)
			}
		})
	}
}

// unschedulable says why pod is not Pending with PodScheduled=False, reason
// Unschedulable and a message containing want.
func unschedulable(pod *corev1.Pod, want string) error {
	c := condition(pod, corev1.PodScheduled)
	switch {
	case pod.Status.Phase != corev1.PodPending:
		return fmt.Errorf("pod %s: phase %s, want Pending", pod.Name, pod.Status.Phase)
	case c == nil:
		return fmt.Errorf("pod %s: no PodScheduled condition yet", pod.Name)
	case c.Status != corev1.ConditionFalse || c.Reason != corev1.PodReasonUnschedulable || !strings.Contains(c.Message, want):
		return fmt.Errorf("pod %s: PodScheduled=%s reason %q message %q, want False, %s, %q",
			pod.Name, c.Status, c.Reason, c.Message, corev1.PodReasonUnschedulable, want)
	}
	return nil
}

// consistently calls check until d has passed and fails on its first error.
func consistently(ctx context.Context, d time.Duration, check func(context.Context) error) error {
	end := time.Now().Add(d)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if err := check(ctx); err != nil {
			return err
		}
		if !time.Now().Before(end) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// dnsName makes a pool name usable in a pod name: lower case, '-' for
// anything but letters and digits.
func dnsName(s string) string {
	return strings.Map(func(r rune) rune {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}
