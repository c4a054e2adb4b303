package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// The faults-dra phase's tests: the faults of the DRA front end, with claim pods
// (a ResourceClaimTemplate of one NIC of a dra pool), each ended by fault.check like the
// faults phase's.

const quarantinedClaims = `kube_rdma_device_plugin_quarantined_files{kind="claim"}`

// needDRAFaults returns the kind of claim pod the phase's DRA faults use (a claim of one NIC
// of faultsConfig.claimPool) or skips t.
func (e *env) needDRAFaults(t *testing.T) loadKind {
	t.Helper()
	if e.faults == nil || e.faults.claims == "" || e.dra == nil || e.dra.pools[e.faults.claimPool] == 0 {
		t.Skip("the phase names no claim records dir or no DRA pool for its faults")
	}
	return e.claimKind(e.faults.claimPool, e.dra.pools[e.faults.claimPool])
}

// claimFiles lists the claim records dir: its files and those of quarantine/
// ("quarantine/<name>"), sorted; nil when there is none.
func (c *faultsConfig) claimFiles() ([]string, error) {
	var out []string
	for _, sub := range []string{"", claimrecord.QuarantineDir} {
		ents, err := os.ReadDir(filepath.Join(c.claims, sub))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read the claim records dir: %w", err)
		}
		for _, d := range ents {
			if !d.IsDir() {
				out = append(out, filepath.Join(sub, d.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// claimRecordsOfLiveClaims checks that every claim record names a ResourceClaim that exists
// with its UID. It reads the files itself (claimrecord.ReadAll would move a torn one aside):
// one that does not decode is an error.
func (e *env) claimRecordsOfLiveClaims(ctx context.Context) error {
	ents, err := os.ReadDir(e.faults.claims)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the claim records dir: %w", err)
	}
	var bad []string
	for _, d := range ents {
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".json") || strings.HasPrefix(d.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(e.faults.claims, d.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // unprepared meanwhile
		}
		if err != nil {
			return err
		}
		var r claimrecord.Record
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("claim record %s: %w", d.Name(), err)
		}
		c, err := e.draAPI.ResourceClaims(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			bad = append(bad, fmt.Sprintf("%s (claim %s/%s gone)", d.Name(), r.Namespace, r.Name))
		case err != nil:
			return err
		case string(c.UID) != r.UID:
			bad = append(bad, fmt.Sprintf("%s (claim %s/%s re-created)", d.Name(), r.Namespace, r.Name))
		}
	}
	if bad != nil {
		return fmt.Errorf("claim records without their claim: %s", strings.Join(bad, ", "))
	}
	return nil
}

// prepareRetries counts the Warning Events of the namespace that say a pod's claims could not
// be prepared (the kubelet retries NodePrepareResources).
func (e *env) prepareRetries(ctx context.Context, ns string) (int, error) {
	ev, err := e.core.Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list events: %w", err)
	}
	n := 0
	for _, v := range ev.Items {
		if v.Type == corev1.EventTypeWarning && strings.Contains(v.Reason, "Prepare") {
			n += max(int(v.Count), 1)
		}
	}
	return n, nil
}

// testFaultDaemonKilledDuringPrepare: claim pods created one every 200 ms; right after the
// first, the node agent's process is killed (SIGKILL), so the kubelet's NodePrepareResources
// of the first ones meets a daemon that is gone or in the middle of a Prepare, and those of
// the next ones a daemon that is restarting. The kubelet retries Prepare until the DRA
// driver is registered again: every claim pod must run with its claim's device, or fail
// loudly. Afterwards no claim record, ResourceClaim, link or lease is left.
func testFaultDaemonKilledDuringPrepare(t *testing.T, e *env) {
	k := e.needDRAFaults(t)
	f := e.beginFaultOf(t, "daemon killed during DRA Prepares", k)
	r0, err := e.daemonRestarts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	const pods = 6
	var killed time.Time
	for i := range pods {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if err := f.createKind(t.Context(), fmt.Sprintf("prep-%02d", i), k); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			time.Sleep(200 * time.Millisecond) // the scheduler allocates, the kubelet prepares
			if _, err := killDaemon(); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}
	err = e.waitDaemonBack(t.Context(), r0, nil)
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	back := time.Since(killed)
	f.healed = killed
	out := f.check(t)
	retries, err := e.prepareRetries(t.Context(), f.ns)
	if err != nil {
		t.Fatal(err)
	}
	f.report(t, fmt.Sprintf("kill -9 of the daemon's process 0.2 s after the 1st of %d claim pods of %s (one every 200 ms): daemon restarted and its device plugin pool allocatable %.1f s after the kill, %d Prepare failures reported as Warning Events (retried by the kubelet)",
		pods, k.name, back.Seconds(), retries), out)
}

// testFaultTornClaimRecord: the claim record of a running claim pod (torn-<pool>) is cut in
// half on disk, then a new claim pod is created. Its Prepare (or another reader of the
// records: the daemon's node state, its netdev check) moves the torn record to
// claims/quarantine/ with its bytes and goes on: the new pod gets its device, the torn pod
// keeps running with its own, the daemon's gauge counts the file. The DRA front end, which
// prepared the claim, writes its record again from memory within the agent's files interval
// (10 s; pkg/dra Preparer.Restore): the kubelet does not prepare a running pod's claim
// again, so without that the claim's device would stay out of the node's in-use check (and
// out of the CNI plugin's reach) for the pod's lifetime. The quarantined copy stays until an
// operator removes it, which the test does after looking at it.
func testFaultTornClaimRecord(t *testing.T, e *env) {
	k := e.needDRAFaults(t)
	c := e.faults
	f := e.beginFaultOf(t, "torn claim record", k)
	torn := e.startWatchedKindNamed(t, f.ns, "torn-"+dnsName(k.name), k)
	claim, err := e.podClaimOf(t.Context(), f.ns, torn.name)
	if err != nil {
		t.Fatal(err)
	}
	path := claimrecord.Path(c.claims, string(claim.UID))
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the claim record of pod %s: %v", torn.name, err)
	}
	cut := orig[:len(orig)/2]
	if err := os.WriteFile(path, cut, 0o600); err != nil {
		t.Fatal(err)
	}
	tornAt := time.Now()
	if err := f.createKind(t.Context(), "after-torn-"+dnsName(k.name), k); err != nil {
		t.Fatal(err)
	}
	moved, err := waitQuarantined(t.Context(), filepath.Join(c.claims, claimrecord.QuarantineDir, filepath.Base(path)+".*"), cut)
	if err != nil {
		t.Fatal(err)
	}
	movedIn := time.Since(tornAt)
	gauge, err := e.waitGauge(t.Context(), quarantinedClaims)
	if err != nil {
		t.Error(err)
	}
	// The front end writes the record again, as it was, while the pod runs.
	if err := waitWrittenAgain(t.Context(), path, orig); err != nil {
		t.Error(err)
	}
	restoredIn := time.Since(tornAt)
	torn.checkIntact(t)
	removeQuarantined(t, moved)
	f.healed = tornAt
	f.watched = append(f.watched, torn)
	out := f.check(t)
	f.report(t, fmt.Sprintf("a running claim pod's record cut in half: moved to claims/quarantine/ %.1f s after (by the next Prepare or a reader of the records), %s = %v, written again as it was %.1f s after the tear (the DRA front end, from memory), its pod kept its device; its Unprepare left nothing",
		movedIn.Seconds(), quarantinedClaims, gauge, restoredIn.Seconds()), out)
}

// testFaultDaemonKilledDuringUnprepare: claim pods run, then all of them are deleted at once;
// as soon as the first of their claim records is gone (the kubelet's first
// NodeUnprepareResources done), the node agent's process is killed (SIGKILL), so the other
// Unprepares meet a daemon that is gone or restarting. The kubelet retries them, and what it
// gives up on the daemon's reconciler unprepares once the claim is gone from the API server
// (pkg/dra, every 30 s): every record of the deleted pods must go, with its CDI spec, and
// their devices be allocatable again; the watched claim pod is untouched. Then fault.check.
func testFaultDaemonKilledDuringUnprepare(t *testing.T, e *env) {
	k := e.needDRAFaults(t)
	c := e.faults
	f := e.beginFaultOf(t, "daemon killed during DRA Unprepares", k)
	pods := min(k.count-1, 4)
	if pods < 2 {
		t.Skipf("pool %s has %d devices: the fault needs a watched pod and at least 2 more", k.name, k.count)
	}
	var names []string
	records := map[string]string{} // pod name -> its claim record's path
	for i := range pods {
		name := fmt.Sprintf("unprep-%02d", i)
		e.createPod(t, k.pod(f.ns, name))
		names = append(names, name)
	}
	for _, name := range names {
		if ran, problems := e.loadPodProblems(t.Context(), f.ns, name, k); !ran || problems != nil {
			t.Fatalf("pod %s before the fault: ran %v, %s", name, ran, strings.Join(problems, "; "))
		}
		claim, err := e.podClaimOf(t.Context(), f.ns, name)
		if err != nil {
			t.Fatal(err)
		}
		records[name] = claimrecord.Path(c.claims, string(claim.UID))
		if _, err := os.Stat(records[name]); err != nil {
			t.Fatalf("the claim record of pod %s: %v", name, err)
		}
	}
	r0, err := e.daemonRestarts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	gone := func() int {
		n := 0
		for _, p := range records {
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				n++
			}
		}
		return n
	}
	deleted := time.Now()
	for _, name := range names {
		if err := e.core.Pods(f.ns).Delete(t.Context(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	// A tight poll, not eventually's: the kubelet unprepares the pods' claims within
	// milliseconds of each other, and the kill must come between them.
	for deadline := time.Now().Add(time.Minute); gone() == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no claim record of the deleted pods removed a minute after their deletion")
		}
	}
	if _, err := killDaemon(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	before := gone()
	err = e.waitDaemonBack(t.Context(), r0, func() error {
		if n := gone(); n < len(records) {
			return fmt.Errorf("%d of %d claim records of the deleted pods removed", n, len(records))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	back := time.Since(killed)
	f.healed = killed
	out := f.check(t)
	f.report(t, fmt.Sprintf("%d claim pods of %s deleted at once, kill -9 of the daemon's process %.1f s after (once the first of their records was removed: %d of %d were then), every record of them removed and every device allocatable %.1f s after the kill",
		pods, k.name, killed.Sub(deleted).Seconds(), before, len(records), back.Seconds()), out)
}

// testDRAMemlock: with the chart's nri.enabled and a memlock on the claim pool, a non-root
// container of a claim pod gets the pool's RLIMIT_MEMLOCK from the daemon's NRI plugin,
// which finds the container by the device nodes the claim's CDI spec gave it (containerd
// applies CDI before it asks NRI plugins). Before, DRA pools were not in the NRI plugin's
// view and a memlock on a dra pool was refused at load: a claim's container kept the
// runtime's 8 MiB.
func testDRAMemlock(t *testing.T, e *env) {
	k := e.needDRAFaults(t)
	if e.faults.draMemlock == "" {
		t.Skip("the phase sets no memlock on its claim pool")
	}
	ns := e.namespace(t)
	k.prepare(t, ns)
	pod := k.pod(ns, "memlock-claim")
	uid := int64(1000)
	nonRoot := true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &nonRoot}
	pod.Spec.Containers[0].Command = []string{"sh", "-c", memlockScript}
	e.createPod(t, pod)
	e.waitRunning(t, ns, pod.Name)
	e.checkMemlock(t, ns, pod.Name, e.faults.draMemlock)
	e.deletePod(t, ns, pod.Name)
}

// waitDaemonBack waits until the daemon's containers have restarted since r0
// (the count before a kill), every extra condition holds, and every pool is
// allocatable again.
func (e *env) waitDaemonBack(ctx context.Context, r0 int32, extra func() error) error {
	return eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		r, err := e.daemonRestarts(ctx)
		if err != nil {
			return err
		}
		if r <= r0 {
			return fmt.Errorf("the daemon's containers restarted %d times, %d before the kill", r, r0)
		}
		if extra != nil {
			if err := extra(); err != nil {
				return err
			}
		}
		return e.waitAllocatable(ctx, 5*time.Second, e.counts())
	})
}
