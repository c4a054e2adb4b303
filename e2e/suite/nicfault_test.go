package suite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// vanishedSample counts the NICs DEL found in neither the pod's netns nor the host's.
const vanishedSample = `kube_rdma_cni_devices_given_up_total{reason="vanished"}`

// chainedNICPod begins the fault what and starts pod name with one device of the chained pool;
// it returns the fault, the pod's attachment record (one device) and vanishedSample before.
func (e *env) chainedNICPod(t *testing.T, what, name string) (*fault, attachment.Attachment, float64) {
	t.Helper()
	c := e.needFaults(t)
	pl := e.pool(e.chainedPool)
	if pl == nil || pl.count < 2 {
		t.Skipf("the chained pool %s has fewer than 2 devices: the watched pod holds one", e.chainedPool)
	}
	f := e.beginFault(t, what, e.chainedPool)
	before, _, err := e.metric(t.Context(), vanishedSample)
	if err != nil {
		t.Fatal(err)
	}
	e.createPod(t, e.poolKind(*pl).pod(f.ns, name))
	e.waitRunning(t, f.ns, name)
	_, rec, err := c.recordOf(t.Context(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Devices) != 1 {
		t.Fatalf("record of %s: %d devices, want 1", name, len(rec.Devices))
	}
	return f, rec, before
}

// deleteWithinTerminating deletes the pod and waits until it is gone, at most maxTerminating
// (an error of t past it, naming the pod as desc); it returns how long that took.
func (e *env) deleteWithinTerminating(t *testing.T, ns, name, desc string) time.Duration {
	t.Helper()
	deleted := time.Now()
	if err := e.core.Pods(ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := eventually(t.Context(), maxTerminating, func(ctx context.Context) error {
		_, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
	terminating := time.Since(deleted)
	if err != nil {
		t.Errorf("pod %s: %v after %.1f s (at most %v)", desc, err, terminating.Seconds(), maxTerminating)
	}
	return terminating
}

// maxTerminating is the longest a pod may stay Terminating because of the CNI plugin: a NIC
// that leaves with its pod must not hold the pod's DEL.
const maxTerminating = 2 * time.Minute

// testFaultNICRemoved: a chained pod's NIC is removed while the pod runs (the harness deletes
// the fixture NIC, a veth, inside the pod's netns: a VF or SF deleted, its driver unbound),
// then the pod is deleted. Its DEL finds the netdev in neither the pod's netns nor the host's:
// it must not wait, so the pod is gone well within maxTerminating; the daemon must report the
// NIC as given up (kube_rdma_cni_devices_given_up_total{reason="vanished"} up by one, a Warning
// Event RDMADeviceGivenUp on the pod naming the device). Then the NIC comes back on the host
// (the harness creates it again) and the invariant check holds: the device is allocatable
// again, no record or lease is left.
func testFaultNICRemoved(t *testing.T, e *env) {
	name := "nic-removed"
	f, rec, before := e.chainedNICPod(t, "NIC removed while its pod ran", name)
	d := rec.Devices[0]
	peer := strings.TrimSpace(e.mustHook(t, 30*time.Second, "nic-remove", rec.Netns, d.PodIfName))
	t.Logf("removed %s (rdma %s, %s in the pod) while pod %s ran; its peer was %s", d.Host.Name, d.RDMA, d.PodIfName, name, peer)
	restored := false
	restore := func() {
		if !restored {
			restored = true
			e.mustHook(t, 30*time.Second, "nic-restore", d.Host.Name, peer)
		}
	}
	defer restore()

	terminating := e.deleteWithinTerminating(t, f.ns, name, "whose NIC was removed")
	var event string
	err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		ev, err := e.core.Events(f.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, v := range ev.Items {
			if v.InvolvedObject.Name == name && v.Reason == "RDMADeviceGivenUp" {
				event = v.Message
				return nil
			}
		}
		return errors.New("no Event RDMADeviceGivenUp on the pod")
	})
	if err != nil {
		t.Error(err)
	} else if !strings.Contains(event, d.RDMA) {
		t.Errorf("Event RDMADeviceGivenUp %q does not name %s", event, d.RDMA)
	}
	var after float64
	err = eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		v, found, err := e.metric(ctx, vanishedSample)
		if err != nil {
			return err
		}
		if after = v; !found || v < before+1 {
			return fmt.Errorf("%s = %v (found %v), want %v", vanishedSample, v, found, before+1)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	// The node state lists it, with the pod that had it.
	e.waitNodeState(t, "the give-up in status.givenUp", func(s *v1alpha1.RDMANodeState) error {
		for _, g := range s.Status.GivenUp {
			if g.Device == d.RDMA && g.Reason == "vanished" && g.Namespace == f.ns && g.Pod == name && g.Command == "DEL" {
				return nil
			}
		}
		return fmt.Errorf("status.givenUp %+v names no DEL of %s/%s giving up %s (vanished)", s.Status.GivenUp, f.ns, name, d.RDMA)
	})
	restore()
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the NIC of a chained pod deleted in its netns, then the pod deleted: gone %.1f s after the delete (at most %v), %s %v -> %v, Event %.100q, listed in the node state's givenUp; NIC created again on the host",
		terminating.Seconds(), maxTerminating, vanishedSample, before, after, event), out)
}

// testFaultNICReprobed: a chained pod's NIC is re-probed while the pod runs (an FLR or mlx5
// health recovery: the VF's netdev leaves the pod's netns and comes back on the host as a new
// netdev, another name and MAC; the harness deletes the fixture veth in the pod, creates it
// again on the host under the new name and MAC and renames the function's sysfs entry), then
// the pod is deleted. Its DEL finds the NIC as its function's one netdev on the host and
// restores the record's name and MAC: the pod is gone well within maxTerminating, nothing is
// given up, and the invariant check holds (the host's links as before the fault).
func testFaultNICReprobed(t *testing.T, e *env) {
	name := "nic-reprobed"
	f, rec, before := e.chainedNICPod(t, "NIC re-probed while its pod ran", name)
	d := rec.Devices[0]
	const newName, newMAC = "reprobed0", "02:00:00:00:e2:01"
	peer := strings.TrimSpace(e.mustHook(t, 30*time.Second, "nic-reprobe", rec.Netns, d.PodIfName, d.Host.Name, newName, newMAC))
	t.Logf("re-probed %s (rdma %s, %s in the pod, MAC %s) while pod %s ran: on the host as %s, MAC %s (peer %s)",
		d.Host.Name, d.RDMA, d.PodIfName, d.Host.MAC, name, newName, newMAC, peer)

	terminating := e.deleteWithinTerminating(t, f.ns, name, "whose NIC was re-probed")
	// DEL renamed the netdev back; the fixture's sysfs follows, as the kernel's would.
	e.mustHook(t, 30*time.Second, "fixture-rename", newName, d.Host.Name)
	// The daemon drains the plugin's give-ups every 5 s: two drains, and nothing given up.
	time.Sleep(11 * time.Second)
	after, _, err := e.metric(t.Context(), vanishedSample)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("%s %v -> %v: the re-probed NIC was reported as vanished, though DEL found it", vanishedSample, before, after)
	}
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the NIC of a chained pod re-probed (back on the host as %s, another MAC), then the pod deleted: gone %.1f s after the delete (at most %v), its netdev back as %s, %s %v -> %v",
		newName, terminating.Seconds(), maxTerminating, d.Host.Name, vanishedSample, before, after), out)
}
