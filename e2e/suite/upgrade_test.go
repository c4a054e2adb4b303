package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// upgradeConfig is what the upgrade phase upgrades to: the installed release is the previous
// one (the phase's release chart and image), these are the working tree's values.
type upgradeConfig struct {
	phase       string   // the phase, naming its report lines
	prevRelease string   // the previous release's commit
	values      []values // helm upgrade's values files, in order
	pods        int      // pods created during each rollout
}

// firstStopGuess paces the first half of the pods: over the time the new pod starts and
// becomes ready beside the old one (the old pod is deleted 2.7-8.6 s after the change on the
// local node); when the old pod is deleted sooner, the second half starts then.
const firstStopGuess = 3 * time.Second

// testUpgradeUnderLoad: with a watched pod of each kind running (e.loadKinds: a device plugin
// pool's, the chained pool's with its netdev, a gpuAligned pool's with a GPU, a DRA pool's
// claim), helm upgrade from the previous release to the working tree, helm rollback to the
// previous release, and helm upgrade again, each while pods asking for one device of a kind
// are created, spread over the rollout. Every pod runs with what it asked for (its kind's
// problems, checked inside the pod); the watched pods keep their container (no restart) and
// what they had; the CNI entry stays all along. After all pods are deleted, no attachment
// record, link, IPAM lease, claim or fake RDMA netns record is left and every device is
// allocatable again.
func testUpgradeUnderLoad(t *testing.T, e *env) {
	e.needHelm(t)
	u := e.upgradeTo
	if u == nil {
		t.Fatal("the phase names nothing to upgrade to")
	}
	files, err := writeValues(t.TempDir(), "values-upgrade", u.values)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatal(err)
	}
	base, err := e.listing(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	kinds, bulk := e.loadKinds()
	var watched []*watchedPod
	var names []string
	for _, k := range kinds {
		w := e.startWatchedKind(t, ns, k)
		watched, names = append(watched, w), append(names, w.name)
	}
	// A one-shot kind's devices come back as each pod exits: room for every pod.
	var pools []pool
	byName := map[string]loadKind{}
	for _, k := range kinds {
		p := pool{name: k.name, mode: "exclusive", count: int64(k.count)}
		if k.shared {
			p.mode = "shared"
		}
		if k.oneShot {
			p.count = int64(u.pods + 1)
		}
		pools, byName[k.name] = append(pools, p), k
	}
	names0, err := loadPools(pools, bulk, u.pods)
	if err != nil {
		t.Fatal(err)
	}
	var load []loadKind
	for _, n := range names0 {
		load = append(load, byName[n])
	}
	prev := u.prevRelease[:min(12, len(u.prevRelease))]
	upgrade := func(ctx context.Context) error {
		args := append(append([]string{"upgrade", e.helm.release}, e.helm.chartRef(e.helm.chart)...), "--reset-values")
		args = append(args, files...)
		_, err := e.runHelm(ctx, append(args, "--wait", "--timeout", rollout.String())...)
		return err
	}
	steps := []struct {
		what string
		run  func(ctx context.Context) error
	}{
		{"helm upgrade " + prev + " -> working tree", upgrade},
		{"helm rollback -> " + prev, func(ctx context.Context) error {
			_, err := e.runHelm(ctx, "rollback", e.helm.release, "1", "--wait", "--timeout", rollout.String())
			return err
		}},
		{"helm upgrade again " + prev + " -> working tree", upgrade},
	}
	pace := firstStopGuess / time.Duration(max(u.pods/2, 1))
	for _, s := range steps {
		e.rolloutUnderLoad(t, s.what, s.run, load, pace, len(watched))
		for _, w := range watched {
			w.checkIntact(t)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	e.deleteParallel(t, ns, names)
	err = eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		now, err := e.listing(ctx)
		if err != nil {
			return err
		}
		var diffs []string
		for _, verb := range listingVerbs {
			if d := cmp.Diff(base[verb], now[verb]); d != "" {
				diffs = append(diffs, fmt.Sprintf("%s: left %v, missing %v", verb, minus(now[verb], base[verb]), minus(base[verb], now[verb])))
			}
		}
		if diffs != nil {
			return errors.New("after every pod is gone, the node's " + strings.Join(diffs, "; "))
		}
		if err := e.claimsLeft(ctx); err != nil {
			return fmt.Errorf("after every pod is gone: %w", err)
		}
		if err := e.fakeRDMAProblems(); err != nil {
			return fmt.Errorf("after every pod is gone: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatalf("after every pod is gone: %v", err)
	}
	line := fmt.Sprintf("%s: after deleting all %d pods (%d watched, %d per rollout x %d; kinds %s): no attachment record, link, IPAM lease%s left, every device allocatable again",
		u.phase, len(watched)+len(load)*len(steps), len(watched), len(load), len(steps), kindCounts(load), leftOver(e))
	t.Log(line)
	e.appendReport(t, line)
}

// loadPools picks the pool of each of n pods with one device, within what the pools have
// beside one watched pod each: the bulk pools' devices (the chained pool's, netdevs checked
// too) for most, taken in turn, a quarter slots of a shared pool, one spare device of each
// other exclusive pool, each pool's pods spread evenly over the n (so that each kind is
// created all through a rollout).
func loadPools(pools []pool, bulk []string, n int) ([]string, error) {
	quota := map[string]int{}
	var order []string
	rest := n
	for _, b := range bulk {
		if poolOf(pools, b) != nil {
			order = append(order, b)
		}
	}
	for _, p := range pools {
		free := int(p.count) - 1
		if slices.Contains(bulk, p.name) || free < 1 {
			continue
		}
		q := min(free, 1)
		if p.mode == "shared" {
			q = min(free, max(n/4, 1))
		}
		q = min(q, rest)
		quota[p.name], rest = q, rest-q
		order = append(order, p.name)
	}
	for more := true; more && rest > 0; {
		more = false
		for _, b := range bulk {
			if p := poolOf(pools, b); p != nil && rest > 0 && quota[b] < int(p.count)-1 {
				quota[b]++
				rest--
				more = true
			}
		}
	}
	if rest > 0 {
		return nil, fmt.Errorf("pools %v: room for %d pods with one device beside the watched ones, want %d", pools, n-rest, n)
	}
	// Each next pod from the pool furthest behind its even share: the least (used+1/2)/quota.
	used := map[string]int{}
	var out []string
	for range n {
		best := ""
		for _, name := range order {
			if used[name] >= quota[name] {
				continue
			}
			if best == "" || (2*used[name]+1)*quota[best] < (2*used[best]+1)*quota[name] {
				best = name
			}
		}
		out = append(out, best)
		used[best]++
	}
	return out, nil
}

// loadPod is a pod created during a rollout.
type loadPod struct {
	name string
	kind loadKind
	at   time.Time // when its creation began
	err  error
}

// burstPace spaces the pods created once the old pod is told to stop: the kubelet's window
// after its stop (kubernetes/kubernetes#121994, docs/device-plugin.md) is ~100 ms.
const burstPace = 100 * time.Millisecond

// rolloutUnderLoad runs change (helm upgrade or rollback of the release) and creates one pod
// per entry of kinds while it rolls out (paceLoad): up to the first half one every pace from
// the change (the new pod's start, both pods running), the rest one every burstPace from the
// moment the old pod is deleted (seen by a watch), where the kubelet drops the pools until
// the new pod registers again. It waits until the DaemonSet has rolled out a new generation
// and its old pod is gone, checks every pod inside it, reports the figures and deletes the
// pods. watched: the running pods beside, for the report.
func (e *env) rolloutUnderLoad(t *testing.T, what string, change func(context.Context) error, kinds []loadKind, pace time.Duration, watched int) {
	t.Helper()
	ds0, err := e.releaseDaemonSet(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	prepared := map[string]bool{}
	for _, k := range kinds {
		if k.prepare != nil && !prepared[k.name] {
			k.prepare(t, ns)
			prepared[k.name] = true
		}
	}
	before := e.mustHook(t, 30*time.Second, "node-state")
	// The CNI entry and node file stay; the binary stays, its content is the new release's.
	stopSampling := e.sampleNodeState(t.Context(), before, func(line string) string {
		switch {
		case strings.HasPrefix(line, "cni-bin kube-rdma "):
			return "cni-bin kube-rdma"
		case strings.HasPrefix(line, "cni-conf "), strings.HasPrefix(line, "cni-bin-file "):
			return line
		}
		return ""
	})
	defer func() { _, _ = stopSampling() }()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stopping, err := e.watchOldPodStop(ctx, ds0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ended := e.watchRollout(ctx, ds0.Generation)
	var mu sync.Mutex
	var created []loadPod
	var wg sync.WaitGroup
	changed := make(chan struct{}) // helm returned: the burst does not wait for a stop it missed
	wg.Go(func() {
		paceLoad(ctx, len(kinds), pace, burstPace, stopping.done, changed, func(i int) {
			k := kinds[i]
			p := loadPod{name: fmt.Sprintf("load-%02d-%s", i, dnsName(k.name)), kind: k, at: time.Now()}
			pod := k.pod(ns, p.name)
			if k.oneShot {
				pod = oneShot(pod)
			}
			_, p.err = e.core.Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			mu.Lock()
			created = append(created, p)
			mu.Unlock()
		})
	})
	err = change(t.Context())
	close(changed)
	if err != nil {
		cancel()
		wg.Wait()
		t.Fatalf("%s: %v", what, err)
	}
	end := <-ended
	wg.Wait()
	if end.err != nil {
		t.Fatalf("%s: %v", what, end.err)
	}
	took, stopAt := end.at.Sub(start), stopping.seen()
	samples, diff := stopSampling()
	if diff != "" {
		t.Errorf("%s: the CNI entry, node file or binary went away during the rollout (-before +during):\n%s", what, diff)
	}

	during, afterStop := 0, 0
	var missing, rejected, stuck []string
	var names []string
	for _, p := range created {
		if p.at.Before(end.at) {
			during++
			if !stopAt.IsZero() && !p.at.Before(stopAt) {
				afterStop++
			}
		}
		if p.err != nil {
			t.Fatalf("%s: create pod %s: %v", what, p.name, p.err)
		}
		names = append(names, p.name)
	}
	oldStop := "not seen"
	if !stopAt.IsZero() {
		oldStop = fmt.Sprintf("%.1f s", stopAt.Sub(start).Seconds())
	}
	for _, p := range created {
		ran, problems := e.loadPodProblems(t.Context(), ns, p.name, p.kind)
		if problems == nil {
			continue
		}
		e.dumpPod(t, ns, p.name)
		m := fmt.Sprintf("pod %s (pool %s, created %.1f s into the rollout of %.1f s; the old pod deleted at %s): %s",
			p.name, p.kind.name, p.at.Sub(start).Seconds(), took.Seconds(), oldStop, strings.Join(problems, "; "))
		switch {
		case ran:
			missing = append(missing, m)
		case admissionRejected(problems):
			// The kubelet refused it at admission (phase Failed, reason
			// UnexpectedAdmissionError, with an Event): loud, never silent, and its
			// controller would create it again. Kubelets without kubernetes#135437 drop
			// the new pod's device plugin client when the old pod's stream ends, until
			// it registers again (docs/upgrades.md): counted and reported, not a failure.
			rejected = append(rejected, m)
		default:
			stuck = append(stuck, m)
		}
	}
	st, err := e.loadPodStarts(t.Context(), ns, created, end.at)
	if err != nil {
		t.Fatal(err)
	}
	slowest, warned, warning := st.slowest, st.warned, st.example
	slowestIs := fmt.Sprintf("Ready %s after its creation", slowest)
	if slices.ContainsFunc(created, func(p loadPod) bool { return p.kind.oneShot }) {
		slowestIs = fmt.Sprintf("container start %s after its scheduling (one-shot pods: each waits for the devices of the one before)", slowest)
	}
	line := fmt.Sprintf("%s: upgrade under load, %s: rollout %.1f s (from the change to the old pod gone; its deletion at %s); %d of %d pods created during it (one every %s, then every %s from the old pod's stop: %d after it), %d pods' containers started before it ended: "+
		"%d ran without something they asked for (device nodes, env, netdev, claim, aligned NIC) and %d never started nor failed (both must be 0); %d rejected by the kubelet at admission (UnexpectedAdmissionError, loud); slowest %s; "+
		"%d with a kubelet warning on the way%s; %d watched pods beside; CNI files unchanged in %d samples",
		e.upgradeTo.phase, what, took.Seconds(), oldStop, during, len(created), pace.Round(time.Millisecond), burstPace, afterStop, st.during, len(missing), len(stuck), len(rejected), slowestIs, warned, warning, watched, samples)
	t.Log(line)
	e.appendReport(t, line)
	for _, m := range rejected {
		t.Logf("%s: rejected by the kubelet at admission (loud): %s", what, m)
	}
	for _, m := range append(stuck, missing...) {
		t.Errorf("%s: %s", what, m)
	}
	if missing != nil || stuck != nil {
		t.FailNow()
	}
	e.deleteParallel(t, ns, names)
}

// paceLoad calls create(0..n-1): one every pace from the start until stop is closed, at
// most the first half so; once stop is closed, at once and then one every burst. The second
// half waits for stop, or for changed (the change is over: a stop it missed).
func paceLoad(ctx context.Context, n int, pace, burst time.Duration, stop, changed <-chan struct{}, create func(i int)) {
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for i := range n {
		switch {
		case i == 0:
		case stopped():
			if !sleepCtx(ctx, burst, nil) {
				return
			}
		case i < n/2:
			// The pace, cut short by the stop: the burst starts with it.
			if !sleepCtx(ctx, pace, stop) {
				return
			}
		default:
			select {
			case <-ctx.Done():
				return
			case <-stop:
			case <-changed:
				if !sleepCtx(ctx, burst, nil) {
					return
				}
			}
		}
		create(i)
	}
}

// sleepCtx waits d, or until early is closed (nil: never); false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration, early <-chan struct{}) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
	case <-early:
	}
	return true
}

// admissionRejected reports whether loadPodProblems found the pod refused by the kubelet at
// admission (its device plugin had no healthy device at that moment).
func admissionRejected(problems []string) bool {
	return len(problems) == 1 && strings.HasPrefix(problems[0], "ended: phase Failed, reason \"UnexpectedAdmissionError\"")
}

// loadPodProblems waits for a pod of kind k to run (a one-shot pod: to run or have ended
// well) and log what it got, and returns whether it ran and what it lacks (nil: nothing):
// not running (rejected by the kubelet, not started), a container restart, the kind's
// problems.
func (e *env) loadPodProblems(ctx context.Context, ns, name string, k loadKind) (ran bool, problems []string) {
	var pod *corev1.Pod
	err := eventually(ctx, podStartup, func(ctx context.Context) error {
		p, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			return nil
		}
		if p.Status.Phase != corev1.PodRunning || !podReady(p) {
			return fmt.Errorf("phase %s, ready %v", p.Status.Phase, podReady(p))
		}
		return nil
	})
	switch {
	case err != nil:
		return false, []string{fmt.Sprintf("not running: %v", err)}
	case pod.Status.Phase == corev1.PodSucceeded && k.oneShot:
	case pod.Status.Phase != corev1.PodRunning:
		return false, []string{fmt.Sprintf("ended: phase %s, reason %q, message %q", pod.Status.Phase, pod.Status.Reason, pod.Status.Message)}
	}
	if cs := container(pod); cs.RestartCount != 0 {
		return true, []string{fmt.Sprintf("container restarted %d times", cs.RestartCount)}
	}
	var l podLog
	err = eventually(ctx, time.Minute, func(ctx context.Context) error {
		s, err := e.logs(ctx, ns, name)
		if err != nil {
			return err
		}
		if l = parseLog(s); l.env == nil || len(l.ticks) == 0 {
			return fmt.Errorf("log has %d tick lines, env %v", len(l.ticks), l.env != nil)
		}
		return nil
	})
	if err != nil {
		return true, []string{fmt.Sprintf("no log of what it got: %v", err)}
	}
	return true, k.problems(ctx, ns, name, l)
}

// startWatchedKind runs a pod watched-<kind> of k and checks what it got (its kind's
// problems); checkIntact compares its links too (they do not change in a pod without
// netdevs).
func (e *env) startWatchedKind(t *testing.T, ns string, k loadKind) *watchedPod {
	t.Helper()
	if k.prepare != nil {
		k.prepare(t, ns)
	}
	return e.startWatchedKindNamed(t, ns, "watched-"+dnsName(k.name), k)
}

// startWatchedKindNamed is startWatchedKind for a pod of the given name, in a namespace
// where what k's pods need is made already.
func (e *env) startWatchedKindNamed(t *testing.T, ns, name string, k loadKind) *watchedPod {
	t.Helper()
	w := &watchedPod{e: e, ns: ns, name: name, chained: true}
	e.createPod(t, k.pod(ns, w.name))
	pod := e.waitRunning(t, ns, w.name)
	w.containerID = container(pod).ContainerID
	l := e.waitLog(t, ns, w.name, 1)
	w.first = l.ticks[0]
	for _, s := range k.problems(t.Context(), ns, w.name, l) {
		t.Errorf("pod %s: %s", w.name, s)
	}
	if t.Failed() {
		t.FailNow()
	}
	return w
}

// kindCounts says how many of the pods are of each kind, in the order of their first pod.
func kindCounts(pods []loadKind) string {
	n := map[string]int{}
	var order []string
	for _, k := range pods {
		if n[k.name] == 0 {
			order = append(order, k.name)
		}
		n[k.name]++
	}
	var out []string
	for _, name := range order {
		out = append(out, fmt.Sprintf("%s %d", name, n[name]))
	}
	return strings.Join(out, ", ")
}

// leftOver names what else the phase checks is left after the pods: claims, fake RDMA
// netns records.
func leftOver(e *env) string {
	var s string
	if e.dra != nil {
		s += ", resource claim"
	}
	if e.gpuAligned != nil && e.gpuAligned.fakeRDMAState != "" {
		s += ", fake RDMA netns record"
	}
	return s
}

// podStarts are the start figures of a rollout's pods.
type podStarts struct {
	slowest time.Duration // the longest from creation (one-shot: scheduling) to start
	during  int           // pods whose container started before the rollout ended
	warned  int           // pods with a Warning event (a container creation retried...)
	example string        // one such event
}

// loadPodStarts returns the longest time from a pod's creation to its Ready condition (the
// API's 1 s resolution; a one-shot pod, which waits for the devices of the one before it:
// from its scheduling to its container's start), how many containers started before end,
// how many pods got a Warning event (a container creation that failed and was retried; a
// one-shot pod's FailedScheduling, its wait, does not count), and one such event's message.
func (e *env) loadPodStarts(ctx context.Context, ns string, created []loadPod, end time.Time) (podStarts, error) {
	var out podStarts
	list, err := e.core.Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list pods: %w", err)
	}
	byName := map[string]loadPod{}
	for _, p := range created {
		byName[p.name] = p
	}
	for i := range list.Items {
		pod := &list.Items[i]
		lp := byName[pod.Name]
		cs := container(pod)
		var started time.Time
		switch {
		case cs.State.Running != nil:
			started = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			started = cs.State.Terminated.StartedAt.Time
		}
		if !started.IsZero() && started.Before(end) {
			out.during++
		}
		switch c := condition(pod, corev1.PodReady); {
		case lp.kind.oneShot:
			if s := condition(pod, corev1.PodScheduled); s != nil && s.Status == corev1.ConditionTrue && !started.IsZero() {
				out.slowest = max(out.slowest, started.Sub(s.LastTransitionTime.Time))
			}
		case c != nil && c.Status == corev1.ConditionTrue:
			out.slowest = max(out.slowest, c.LastTransitionTime.Sub(lp.at))
		}
	}
	ev, err := e.core.Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list events: %w", err)
	}
	warned := map[string]bool{}
	for _, v := range ev.Items {
		// MissingClusterDNS: the node has no cluster DNS, every pod gets it.
		if v.Type != corev1.EventTypeWarning || v.InvolvedObject.Kind != "Pod" || v.Reason == "MissingClusterDNS" ||
			(v.Reason == "FailedScheduling" && byName[v.InvolvedObject.Name].kind.oneShot) {
			continue
		}
		if !warned[v.InvolvedObject.Name] && out.example == "" {
			out.example = fmt.Sprintf(" (e.g. %s %s: %.300s)", v.InvolvedObject.Name, v.Reason, v.Message)
		}
		warned[v.InvolvedObject.Name] = true
	}
	out.slowest, out.warned = out.slowest.Round(100*time.Millisecond), len(warned)
	return out, nil
}

// releaseDaemonSet is the release's only DaemonSet.
func (e *env) releaseDaemonSet(ctx context.Context) (*appsv1.DaemonSet, error) {
	list, err := e.apps.DaemonSets(e.helm.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + e.helm.release})
	if err != nil {
		return nil, fmt.Errorf("list DaemonSets of release %s: %w", e.helm.release, err)
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("release %s has %d DaemonSets in %s, want 1", e.helm.release, len(list.Items), e.helm.namespace)
	}
	return &list.Items[0], nil
}

// oldPodStop is closed (done) when the watch saw the old pod's deletion, at at.
type oldPodStop struct {
	done chan struct{}
	at   time.Time
}

// seen returns when the old pod's deletion was seen, zero if not (yet).
func (s *oldPodStop) seen() time.Time {
	select {
	case <-s.done:
		return s.at
	default:
		return time.Time{}
	}
}

// watchOldPodStop watches the pods of ds (before a change) until one of them is being
// deleted: the rollout stops the old pod.
func (e *env) watchOldPodStop(ctx context.Context, ds *appsv1.DaemonSet) (*oldPodStop, error) {
	pods := e.core.Pods(ds.Namespace)
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list pods of DaemonSet %s: %w", ds.Name, err)
	}
	w, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return nil, fmt.Errorf("watch pods of DaemonSet %s: %w", ds.Name, err)
	}
	s := &oldPodStop{done: make(chan struct{})}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && (p.DeletionTimestamp != nil || ev.Type == watch.Deleted) {
				s.at = time.Now()
				close(s.done)
				return
			}
		}
	}()
	return s, nil
}

// rolloutEnd is when a rollout was first seen done, or why it was not.
type rolloutEnd struct {
	at  time.Time
	err error
}

// watchRollout polls the release's DaemonSet until a generation after gen0 has rolled out
// and no pod of it is left but the new ones (the old pod's stop is part of the rollout), and
// sends when it first saw that.
func (e *env) watchRollout(ctx context.Context, gen0 int64) <-chan rolloutEnd {
	ch := make(chan rolloutEnd, 1)
	go func() {
		err := eventually(ctx, rollout, func(ctx context.Context) error {
			ds, err := e.releaseDaemonSet(ctx)
			if err != nil {
				return err
			}
			if ds.Generation <= gen0 {
				return fmt.Errorf("DaemonSet %s still at generation %d", ds.Name, gen0)
			}
			if err := rolledOut(ds, ds.Generation); err != nil {
				return err
			}
			pods, err := e.core.Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
			if err != nil {
				return fmt.Errorf("list pods of DaemonSet %s: %w", ds.Name, err)
			}
			if n := int32(len(pods.Items)); n != ds.Status.DesiredNumberScheduled {
				return fmt.Errorf("DaemonSet %s: %d pods, want %d (the old one still stopping)", ds.Name, n, ds.Status.DesiredNumberScheduled)
			}
			return nil
		})
		ch <- rolloutEnd{at: time.Now(), err: err}
	}()
	return ch
}

// TestPaceLoad: the first half paced until the stop, the rest right from it; without a stop
// the second half waits for the change's end; nothing after the context ends.
func TestPaceLoad(t *testing.T) {
	const n = 10
	run := func(ctx context.Context, stopAfter int, changed <-chan struct{}) (before, after int) {
		stop := make(chan struct{})
		var stopped bool
		paceLoad(ctx, n, 10*time.Millisecond, time.Millisecond, stop, changed, func(i int) {
			if stopped {
				after++
			} else {
				before++
			}
			if i+1 == stopAfter {
				close(stop)
				stopped = true
			}
		})
		return before, after
	}
	never := make(chan struct{})
	if b, a := run(t.Context(), 2, never); b != 2 || a != 8 {
		t.Errorf("stop after 2 pods: %d before it, %d after; want 2, 8", b, a)
	}
	if b, a := run(t.Context(), n/2, never); b != n/2 || a != n/2 {
		t.Errorf("stop after the first half: %d before it, %d after; want %d, %d", b, a, n/2, n/2)
	}
	closed := make(chan struct{})
	close(closed)
	if b, a := run(t.Context(), 0, closed); b != n || a != 0 {
		t.Errorf("no stop, the change over: %d created, %d after a stop; want %d, 0", b, a, n)
	}
	// No stop, the change still running: the first half, then nothing once the context ends.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	got := 0
	time.AfterFunc(200*time.Millisecond, cancel)
	paceLoad(ctx, n, time.Millisecond, time.Millisecond, never, never, func(int) { got++ })
	if got != n/2 {
		t.Errorf("no stop, the change running until the context ends: %d created; want the first half, %d", got, n/2)
	}
}

func TestLoadPools(t *testing.T) {
	pools := []pool{{"ib", "exclusive", 2}, {"vf", "exclusive", 24}, {"roce-shared", "shared", 8}}
	vf := []string{"vf"}
	tests := []struct {
		name    string
		pools   []pool
		bulk    []string
		n       int
		want    []string
		wantErr bool
	}{
		{name: "every kind", pools: pools, bulk: vf, n: 8,
			want: []string{"vf", "roce-shared", "vf", "vf", "ib", "vf", "roce-shared", "vf"}},
		{name: "twenty", pools: pools, bulk: vf, n: 20, want: []string{
			"vf", "roce-shared", "vf", "vf", "vf", "roce-shared", "vf", "vf", "vf", "ib",
			"roce-shared", "vf", "vf", "vf", "roce-shared", "vf", "vf", "vf", "roce-shared", "vf"}},
		{name: "no chained pool", pools: []pool{{"ib", "exclusive", 2}, {"roce-shared", "shared", 8}}, bulk: vf, n: 2,
			want: []string{"ib", "roce-shared"}},
		{name: "too few devices", pools: []pool{{"vf", "exclusive", 4}}, bulk: vf, n: 4, wantErr: true},
		// The DRA phase: two bulk pools taken in turn, 11 spare devices each, one HCA.
		{name: "two bulk pools", pools: []pool{{"vf-dp", "exclusive", 12}, {"ib-dra", "exclusive", 2}, {"vf-dra", "exclusive", 12}},
			bulk: []string{"vf-dp", "vf-dra"}, n: 20, want: []string{
				"vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra",
				"ib-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp", "vf-dra", "vf-dp"}},
		{name: "two bulk pools, too few devices", pools: []pool{{"vf-dp", "exclusive", 6}, {"vf-dra", "exclusive", 6}},
			bulk: []string{"vf-dp", "vf-dra"}, n: 11, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadPools(tc.pools, tc.bulk, tc.n)
			if (err != nil) != tc.wantErr {
				t.Fatalf("loadPools: %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("loadPools (-want +got):\n%s", diff)
			}
		})
	}
}
