package suite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
)

// testParallelPods: parallelPods (20) pods with one device each, created at
// once, all run (their start latency is reported against as many pods without
// devices, started the same way just before); deleted at once, they leave the
// node's links, CNI records and IPAM leases as they were.
func testParallelPods(t *testing.T, e *env) {
	p := e.devicePool(t)
	n := e.parallelPods
	if int64(n) > p.count {
		t.Logf("%d parallel pods, but pool %s has %d devices: %d pods", n, p.name, p.count, p.count)
		n = int(p.count)
	}
	ns := e.namespace(t)
	var base nodeListing
	if e.hook == "" {
		t.Log("E2E_NODE_HOOK unset: the node's links, records and leases are not compared")
	} else {
		var err error
		if base, err = e.listing(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// The reference, in the same run on the same node: as many pods of the same image that ask
	// for no device (no device plugin, no kube-rdma CNI work), started and deleted the same way.
	refNS := e.namespace(t)
	refNames := podNames("ref", n)
	ref := e.startParallel(t, refNS, "", refNames)
	e.deleteParallel(t, refNS, refNames)
	names := podNames("par", n)
	got := e.startParallel(t, ns, p.name, names)
	e.reportLatency(t, n, got, ref)
	if p.name == e.chainedPool {
		for _, name := range names {
			for _, s := range netdevProblems(e.waitLog(t, ns, name, 1).ticks[0].links, 1) {
				t.Errorf("pod %s: %s", name, s)
			}
		}
	}
	e.deleteParallel(t, ns, names)
	if base == nil {
		return
	}
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		now, err := e.listing(ctx)
		if err != nil {
			return err
		}
		var diffs []string
		for _, verb := range listingVerbs {
			if !slices.Equal(base[verb], now[verb]) {
				diffs = append(diffs, fmt.Sprintf("%s: missing %v, new %v", verb, minus(base[verb], now[verb]), minus(now[verb], base[verb])))
			}
		}
		if diffs != nil {
			return errors.New("after the pods are gone, the node's " + strings.Join(diffs, "; "))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func podNames(prefix string, n int) []string {
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return names
}

// startParallel creates the pods at once (asking for one device of pool each;
// pool "": none) and returns each one's start latency, creation to Ready, as
// the watcher saw it (wall clock, ms).
func (e *env) startParallel(t *testing.T, ns, pool string, names []string) []time.Duration {
	t.Helper()
	var pods []*corev1.Pod
	for _, name := range names {
		pods = append(pods, e.devicePod(ns, name, pool, 1))
	}
	return e.startPods(t, ns, pods)
}

// startPods creates the pods, all in namespace ns, at once and returns each
// one's start latency, creation to Ready, as the watcher saw it.
func (e *env) startPods(t *testing.T, ns string, specs []*corev1.Pod) []time.Duration {
	t.Helper()
	return e.startPodsWithin(t, ns, specs, podStartup+time.Duration(len(specs))*2*time.Second)
}

// startPodsWithin is startPods waiting at most limit for every pod to be Ready.
func (e *env) startPodsWithin(t *testing.T, ns string, specs []*corev1.Pod, limit time.Duration) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rw, err := e.watchReady(ctx, ns)
	if err != nil {
		t.Fatal(err)
	}
	created := e.createParallel(t, specs)
	pods := e.waitAllReadyWithin(t, ns, len(specs), limit)
	var wall []time.Duration
	for i := range pods {
		if at, ok := rw.readyAt(pods[i].Name); ok {
			wall = append(wall, at.Sub(created[pods[i].Name]))
		} else {
			t.Errorf("pod %s: the watch never saw it Ready (%v)", pods[i].Name, rw.lastErr())
		}
	}
	return wall
}

// createParallel creates the pods at once and returns when each creation
// started, by pod name.
func (e *env) createParallel(t *testing.T, pods []*corev1.Pod) map[string]time.Time {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	created := map[string]time.Time{}
	var errs []error
	for _, pod := range pods {
		wg.Go(func() {
			start := time.Now()
			_, err := e.core.Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			created[pod.Name] = start
			if err != nil {
				errs = append(errs, fmt.Errorf("create pod %s: %w", pod.Name, err))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return created
}

// waitAllReadyWithin waits at most limit until the namespace's n pods are Running and
// Ready and returns them; on failure it prints a few of those that are not.
func (e *env) waitAllReadyWithin(t *testing.T, ns string, n int, limit time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	var notReady []string
	err := eventually(t.Context(), limit, func(ctx context.Context) error {
		list, err := e.core.Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pods, notReady = list.Items, nil
		for i := range pods {
			if pods[i].Status.Phase != corev1.PodRunning || !podReady(&pods[i]) {
				notReady = append(notReady, pods[i].Name)
			}
		}
		if len(pods) != n || notReady != nil {
			return fmt.Errorf("%d of %d pods Running and Ready", len(pods)-len(notReady), n)
		}
		return nil
	})
	if err != nil {
		for _, name := range notReady[:min(3, len(notReady))] {
			e.dumpPod(t, ns, name)
		}
		t.Fatal(err)
	}
	return pods
}

// reportLatency logs the start latency of the pods with devices against the
// reference pods without, and appends it to E2E_REPORT.
func (e *env) reportLatency(t *testing.T, n int, got, ref []time.Duration) {
	t.Helper()
	ratio := 0.0
	if median(ref) > 0 {
		ratio = float64(median(got)) / float64(median(ref))
	}
	line := fmt.Sprintf("pod start latency, %d pods at once, creation to Ready: with one device each median %s, worst %s; "+
		"without devices (reference, same run) median %s, worst %s; ratio of medians %.2f",
		n, median(got), worst(got), median(ref), worst(ref), ratio)
	t.Log(line)
	e.appendReport(t, line)
}

// appendReport appends a line to E2E_REPORT, when set: the figures the
// harness prints at the end.
func (e *env) appendReport(t *testing.T, line string) {
	t.Helper()
	if e.report == "" {
		return
	}
	f, err := os.OpenFile(e.report, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, line)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Errorf("write E2E_REPORT: %v", err)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return m.Round(time.Millisecond)
}

func worst(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d).Round(time.Millisecond)
}

// deleteParallel deletes the pods at once and waits until they are gone.
func (e *env) deleteParallel(t *testing.T, ns string, names []string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, name := range names {
		wg.Go(func() { errs[i] = e.core.Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		list, err := e.core.Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) > 0 {
			return fmt.Errorf("%d of %d pods still there", len(list.Items), len(names))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pods deleted in %s", len(names), time.Since(start).Round(time.Millisecond))
}

// readyWatch records when each pod of a namespace was first seen Ready.
type readyWatch struct {
	mu    sync.Mutex
	ready map[string]time.Time
	err   error
}

func (w *readyWatch) readyAt(name string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.ready[name]
	return at, ok
}

func (w *readyWatch) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// watchReady starts watching the namespace's pods until ctx ends.
func (e *env) watchReady(ctx context.Context, ns string) (*readyWatch, error) {
	pods := e.core.Pods(ns)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	w := &readyWatch{ready: map[string]time.Time{}}
	go w.run(ctx, pods, list.ResourceVersion)
	return w, nil
}

// run watches from resource version rv and watches again when the server
// ends the watch, from the last version seen.
func (w *readyWatch) run(ctx context.Context, pods corev1client.PodInterface, rv string) {
	for ctx.Err() == nil {
		wi, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(pollInterval):
			}
			continue
		}
		for ev := range wi.ResultChan() {
			now := time.Now()
			if ev.Type == watch.Error {
				w.mu.Lock()
				w.err = apierrors.FromObject(ev.Object)
				w.mu.Unlock()
				rv = "" // expired: start again from the current state
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			w.mu.Lock()
			if _, seen := w.ready[p.Name]; !seen && ev.Type != watch.Bookmark && podReady(p) {
				w.ready[p.Name] = now
			}
			w.mu.Unlock()
		}
		wi.Stop()
	}
}
