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
)

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
	c := e.needFaults(t)
	pl := e.pool(e.chainedPool)
	if pl == nil || pl.count < 2 {
		t.Skipf("the chained pool %s has fewer than 2 devices: the watched pod holds one", e.chainedPool)
	}
	f := e.beginFault(t, "NIC removed while its pod ran", e.chainedPool)
	const sample = `kube_rdma_cni_devices_given_up_total{reason="vanished"}`
	before, _, err := e.metric(t.Context(), sample)
	if err != nil {
		t.Fatal(err)
	}
	name := "nic-removed"
	e.createPod(t, e.poolKind(*pl).pod(f.ns, name))
	e.waitRunning(t, f.ns, name)
	_, rec, err := c.recordOf(t.Context(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Devices) != 1 {
		t.Fatalf("record of %s: %d devices, want 1", name, len(rec.Devices))
	}
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

	deleted := time.Now()
	if err := e.core.Pods(f.ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = eventually(t.Context(), maxTerminating, func(ctx context.Context) error {
		_, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
	terminating := time.Since(deleted)
	if err != nil {
		t.Errorf("pod whose NIC was removed: %v after %.1f s (at most %v)", err, terminating.Seconds(), maxTerminating)
	}
	var event string
	err = eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
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
		v, found, err := e.metric(ctx, sample)
		if err != nil {
			return err
		}
		if after = v; !found || v < before+1 {
			return fmt.Errorf("%s = %v (found %v), want %v", sample, v, found, before+1)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	restore()
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the NIC of a chained pod deleted in its netns, then the pod deleted: gone %.1f s after the delete (at most %v), %s %v -> %v, Event %.100q; NIC created again on the host",
		terminating.Seconds(), maxTerminating, sample, before, after, event), out)
}

// testFaultNICReprobed: a chained pod's NIC is re-probed while the pod runs (an FLR or mlx5
// health recovery: the VF's netdev leaves the pod's netns and comes back on the host as a new
// netdev, another name and MAC; the harness deletes the fixture veth in the pod, creates it
// again on the host under the new name and MAC and renames the function's sysfs entry), then
// the pod is deleted. Its DEL finds the NIC as its function's one netdev on the host and
// restores the record's name and MAC: the pod is gone well within maxTerminating, nothing is
// given up, and the invariant check holds (the host's links as before the fault).
func testFaultNICReprobed(t *testing.T, e *env) {
	c := e.needFaults(t)
	pl := e.pool(e.chainedPool)
	if pl == nil || pl.count < 2 {
		t.Skipf("the chained pool %s has fewer than 2 devices: the watched pod holds one", e.chainedPool)
	}
	f := e.beginFault(t, "NIC re-probed while its pod ran", e.chainedPool)
	const sample = `kube_rdma_cni_devices_given_up_total{reason="vanished"}`
	before, _, err := e.metric(t.Context(), sample)
	if err != nil {
		t.Fatal(err)
	}
	name := "nic-reprobed"
	e.createPod(t, e.poolKind(*pl).pod(f.ns, name))
	e.waitRunning(t, f.ns, name)
	_, rec, err := c.recordOf(t.Context(), f.ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Devices) != 1 {
		t.Fatalf("record of %s: %d devices, want 1", name, len(rec.Devices))
	}
	d := rec.Devices[0]
	const newName, newMAC = "reprobed0", "02:00:00:00:e2:01"
	peer := strings.TrimSpace(e.mustHook(t, 30*time.Second, "nic-reprobe", rec.Netns, d.PodIfName, d.Host.Name, newName, newMAC))
	t.Logf("re-probed %s (rdma %s, %s in the pod, MAC %s) while pod %s ran: on the host as %s, MAC %s (peer %s)",
		d.Host.Name, d.RDMA, d.PodIfName, d.Host.MAC, name, newName, newMAC, peer)

	deleted := time.Now()
	if err := e.core.Pods(f.ns).Delete(t.Context(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = eventually(t.Context(), maxTerminating, func(ctx context.Context) error {
		_, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there (%v)", name, err)
	})
	terminating := time.Since(deleted)
	if err != nil {
		t.Errorf("pod whose NIC was re-probed: %v after %.1f s (at most %v)", err, terminating.Seconds(), maxTerminating)
	}
	// DEL renamed the netdev back; the fixture's sysfs follows, as the kernel's would.
	e.mustHook(t, 30*time.Second, "fixture-rename", newName, d.Host.Name)
	// The daemon drains the plugin's give-ups every 5 s: two drains, and nothing given up.
	time.Sleep(11 * time.Second)
	after, _, err := e.metric(t.Context(), sample)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("%s %v -> %v: the re-probed NIC was reported as vanished, though DEL found it", sample, before, after)
	}
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the NIC of a chained pod re-probed (back on the host as %s, another MAC), then the pod deleted: gone %.1f s after the delete (at most %v), its netdev back as %s, %s %v -> %v",
		newName, terminating.Seconds(), maxTerminating, d.Host.Name, sample, before, after), out)
}
