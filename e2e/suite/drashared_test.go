package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// capShares is the consumable capacity a shared dra pool's devices are published with
// (pkg/dra.CapacityShares).
const capShares resourceapi.QualifiedName = "kube-rdma.io/shares"

// schedulerRetry is how long kube-scheduler leaves a pod it found unschedulable before it
// tries it again without an event that may make it schedulable (its
// podMaxInUnschedulablePodsDuration, 5 min by default), and a margin.
const schedulerRetry = 5*time.Minute + 30*time.Second

// testDRASharedNIC: the DRA phase's sharedPool publishes its one NIC for sharedSlots claims at
// once (allowMultipleAllocations, capacity kube-rdma.io/shares). sharedSlots pods, each with a
// claim of one share, run on the NIC at once, each claim with a shareID of its own, and each
// container gets the NIC's device nodes (and NCCL_IB_HCA where the pool sets NCCL's variables)
// and, with the CNI chained to the claims (sharedSubnet), net1 of its own in its claim's
// status (checkShareNetdev); one pod more stays Pending. Port 1 of
// the NIC going down taints the one device every sharer's claim holds (the running pods stay:
// NoSchedule); back up, the taint goes. A sharer deleted, the waiting pod gets the share.
func testDRASharedNIC(t *testing.T, e *env) {
	c := e.needDRA(t)
	if c.sharedPool == "" || c.sharedSlots < 1 || c.pools[c.sharedPool] != 1 {
		t.Fatalf("the phase names no shared pool of one NIC (sharedPool %q, slots %d, pools %v)", c.sharedPool, c.sharedSlots, c.pools)
	}
	devs, err := e.draDevices(t.Context(), draDriver)
	if err != nil {
		t.Fatal(err)
	}
	var nic resourceapi.Device
	for _, d := range devs {
		if attrString(d, attrPool) == c.sharedPool {
			nic = d
		}
	}
	if nic.AllowMultipleAllocations == nil || !*nic.AllowMultipleAllocations {
		t.Fatalf("device %s of shared pool %s: allowMultipleAllocations %v (is DRAConsumableCapacity on?)", nic.Name, c.sharedPool, nic.AllowMultipleAllocations)
	}
	if q, ok := nic.Capacity[capShares]; !ok || q.Value.Value() != int64(c.sharedSlots) {
		t.Fatalf("device %s capacity %+v, want %s: %d", nic.Name, nic.Capacity, capShares, c.sharedSlots)
	}
	ns := e.namespace(t)
	req := request("nic", draClass(c.sharedPool))
	req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{capShares: resource.MustParse("1")}}
	e.createTemplate(t, ns, "share", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}})

	// The sharers are created at once; their start latencies (creation to Ready) are the
	// shared claim's figure in docs/dra.md.
	pods := podNames("sharer", c.sharedSlots)
	shares := map[string]string{} // shareID -> pod
	var specs []*corev1.Pod
	for _, p := range pods {
		specs = append(specs, e.claimPod(ns, p, "share"))
	}
	// Kubernetes 1.34's scheduler (consumable capacity alpha) can count a share twice while
	// the claim that holds it is both in flight and already seen allocated (its
	// GatherAllocatedState adds the in-flight claims to the informer's view): a sharer
	// scheduled in that moment is found unschedulable with a share free, and a change of
	// another claim does not wake it, so it waits for the scheduler's periodic retry of
	// unschedulable pods (5 min). Wait that long, and report the wait.
	lat := e.startPodsWithin(t, ns, specs, podStartup+schedulerRetry)
	for _, l := range lat {
		if l > time.Minute {
			t.Logf("a sharer waited %s from creation to Ready: the scheduler found it unschedulable with a share free, then tried again", l.Round(time.Second))
			e.appendReport(t, fmt.Sprintf("dra-shared: one of the %d sharers created at once was Ready only %s after its creation (kube-scheduler found it unschedulable with a share free and tried it again later)", len(lat), l.Round(time.Second)))
		}
	}
	nets := map[string]string{} // a sharer's MAC and each address -> pod
	for _, p := range pods {
		r := e.shareOf(t, ns, p, nic.Name)
		if other, dup := shares[r]; dup {
			t.Errorf("pods %s and %s have share %s", other, p, r)
		}
		shares[r] = p
		e.checkNICContainer(t, ns, p, nic)
		e.checkShareNetdev(t, c, ns, p, nets)
	}

	// kubectl rdma pods lists the claim pods with the NIC (from the RDMANodeState's claims).
	rdma := attrString(nic, attrRDMA)
	var out string
	err = eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		var code int
		out, code = e.kubectlRDMA(t, "pods", "-n", ns)
		if code != 0 {
			return fmt.Errorf("exit %d", code)
		}
		for _, p := range pods {
			if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.Contains(l, p) && strings.Contains(l, rdma) }) {
				return fmt.Errorf("no line with %s and %s", p, rdma)
			}
		}
		return nil
	})
	if err != nil {
		t.Errorf("kubectl rdma pods -n %s: %v:\n%s", ns, err, out)
	}
	t.Logf("kubectl rdma pods -n %s:\n%s", ns, out)

	// One more: no share left.
	extra := "sharer-extra"
	e.createPod(t, e.claimPod(ns, extra, "share"))
	err = eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		pod, err := e.core.Pods(ns).Get(ctx, extra, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return unschedulable(pod, "")
	})
	if err == nil {
		err = e.staysPending(t.Context(), ns, extra, 5*time.Second)
	}
	if err != nil {
		t.Fatalf("a claim beyond the NIC's %d shares: %v", c.sharedSlots, err)
	}

	// Port down: the taint is on the one device every sharer holds.
	restored := e.portUpOnCleanup(t, rdma, nil)
	e.mustHook(t, 30*time.Second, "port-state", rdma, "1", "down")
	e.waitTaint(t, nic.Name, true)
	for _, p := range pods {
		if r := e.shareOf(t, ns, p, nic.Name); shares[r] != p {
			t.Errorf("pod %s's share changed to %s", p, r)
		}
		pod, err := e.core.Pods(ns).Get(t.Context(), p, metav1.GetOptions{})
		if err != nil || pod.Status.Phase != corev1.PodRunning {
			t.Errorf("sharer %s with the NIC tainted NoSchedule: %v, phase %v; want it running", p, err, pod.Status.Phase)
		}
	}
	e.mustHook(t, 30*time.Second, "port-state", rdma, "1", "up")
	restored()
	e.waitTaint(t, nic.Name, false)

	// A sharer goes: the waiting pod gets its share.
	e.deletePod(t, ns, pods[0])
	e.waitRunning(t, ns, extra)
	r := e.shareOf(t, ns, extra, nic.Name)
	if _, dup := shares[r]; dup {
		t.Errorf("the waiting pod got share %s of %s", r, shares[r])
	}
	e.checkNICContainer(t, ns, extra, nic)
	e.checkShareNetdev(t, c, ns, extra, nets)
	netdevs := "no CNI"
	if c.sharedSubnet != "" {
		netdevs = "each with its own macvlan child net1 (MAC, address) in its claim's status.devices"
	}
	line := fmt.Sprintf("dra-shared: %d pods shared NIC %s (%s) of pool %s, created at once, creation to Ready median %s, worst %s, each with its own shareID, %s; one more Pending until a sharer went; port down tainted the one device every sharer holds",
		c.sharedSlots, rdma, nic.Name, c.sharedPool, median(lat), worst(lat), netdevs)
	t.Log(line)
	e.appendReport(t, line)
}

// shareOf is the shareID of the pod's claim's one result, which must be a share of device
// with one share consumed.
func (e *env) shareOf(t *testing.T, ns, pod, device string) string {
	t.Helper()
	claim := e.podClaim(t, ns, pod)
	r := allocated(t, claim)["nic"]
	if r.Device != device || r.ShareID == nil {
		t.Fatalf("pod %s's claim %s: result %+v, want a share of %s", pod, claim.Name, r, device)
	}
	if q := r.ConsumedCapacity[capShares]; q.Value() != 1 {
		t.Errorf("pod %s's claim consumed %v, want 1 of %s", pod, r.ConsumedCapacity, capShares)
	}
	return strings.TrimSpace(string(*r.ShareID))
}

// checkShareNetdev: with the CNI chained to the claims (sharedSubnet), the pod has net1 and
// its claim's status.devices entry of its share names net1 with an address of sharedSubnet
// and a MAC, none of which another sharer has (seen: by MAC and address, the pod).
func (e *env) checkShareNetdev(t *testing.T, c draConfig, ns, pod string, seen map[string]string) {
	t.Helper()
	if c.sharedSubnet == "" {
		return
	}
	if links := e.waitLog(t, ns, pod, 1).last().links; !slices.Contains(links, "net1") {
		t.Errorf("sharer %s: links %v, want net1 (a macvlan child of the shared NIC)", pod, links)
	}
	claim := e.podClaim(t, ns, pod)
	st := e.waitClaimNetwork(t, ns, claim.Name, allocated(t, claim)["nic"], "net1", c.sharedSubnet)
	for _, k := range append([]string{st.NetworkData.HardwareAddress}, st.NetworkData.IPs...) {
		if other, dup := seen[k]; dup {
			t.Errorf("sharers %s and %s both have %s", other, pod, k)
		}
		seen[k] = pod
	}
	t.Logf("sharer %s: claim %s status: %s %s %v", pod, claim.Name, st.NetworkData.InterfaceName, st.NetworkData.HardwareAddress, st.NetworkData.IPs)
}
