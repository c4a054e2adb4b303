package suite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// reclaimedSample counts the attachments the daemon's reclaimer restored.
const reclaimedSample = `kube_rdma_device_plugin_cni_attachments_reclaimed_total{result="success"}`

// testFaultDELNeverCame: a chained pod is deleted while the kube-rdma entry is out of the
// node's conflist (cni-chain stopped, the entry taken out: what a primary CNI agent rewriting
// its conflist does), so its DEL never reaches kube-rdma and its record stays. Its NIC, moved
// out of the pod's netns to the host as "dev9" just before (as the kernel returns a physical
// NIC when a netns dies; the fixture's veth would die with it), is on the host by MAC. The
// daemon's reclaimer, which runs the installed plugin's `kube-rdma reclaim`, must then give
// the NIC its name back, release the lease and remove the record within a pass (30 s); the
// invariant check holds after.
func testFaultDELNeverCame(t *testing.T, e *env) {
	c := e.needFaults(t)
	name := "del-never-came"
	f, rec, _ := e.chainedNICPod(t, "DEL never came", name)
	d := rec.Devices[0]
	before, _, err := e.metric(t.Context(), reclaimedSample)
	if err != nil {
		t.Fatal(err)
	}
	orig, without := c.conflistWithout(t)
	stopped := false
	resume := func() {
		if !stopped {
			return
		}
		stopped = false
		if err := writeConflist(c.conflist, orig); err != nil {
			t.Errorf("restore %s: %v", c.conflist, err)
		}
		if _, err := signalChainer(syscall.SIGCONT); err != nil {
			t.Errorf("resume cni-chain: %v", err)
		}
	}
	t.Cleanup(resume)
	if _, err := signalChainer(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := writeConflist(c.conflist, without); err != nil {
		t.Fatal(err)
	}
	const returned = "dev9"
	if out, err := exec.Command("nsenter", "--net="+rec.Netns, "ip", "link", "set", d.PodIfName, "netns", "1", "name", returned).CombinedOutput(); err != nil {
		t.Fatalf("move %s out of pod %s's netns: %v: %s", d.PodIfName, name, err, out)
	}
	terminating := e.deleteWithinTerminating(t, f.ns, name, "whose DEL never reaches kube-rdma")
	if _, err := os.Stat(rec.Netns); err == nil {
		t.Logf("pod %s's netns %s is still there after its delete", name, rec.Netns)
	}
	recorded := func() (bool, error) {
		recs, err := c.records()
		if err != nil {
			return false, err
		}
		for _, a := range recs {
			if a.Key == rec.Key {
				return true, nil
			}
		}
		return false, nil
	}
	there, err := recorded()
	if err != nil {
		t.Fatal(err)
	}
	// The reclaimer's pass (every 30 s) may come between the delete and this check: then its
	// counter says it took the record. Gone without it, a DEL reached kube-rdma after all.
	early := !there
	if early {
		err := eventually(t.Context(), 10*time.Second, func(ctx context.Context) error {
			v, _, err := e.metric(ctx, reclaimedSample)
			if err == nil && v < before+1 {
				err = fmt.Errorf("%s = %v, want %v", reclaimedSample, v, before+1)
			}
			return err
		})
		if err != nil {
			t.Fatalf("the record of %s went without kube-rdma in the conflist and not by the reclaimer (%v): the test did not keep its DEL away", name, err)
		}
	}
	// The entry stays out of the conflist, and cni-chain stopped, until the reclaimer has
	// taken the record: with the entry back, the runtime's own later DEL of the pod's sandbox
	// (or its GC) can reach kube-rdma first and take the record, and then this run would not
	// show the reclaimer. The reclaimer reads neither the conflist nor cni-chain.
	deleted := time.Now()
	err = eventually(t.Context(), 90*time.Second, func(context.Context) error {
		there, err := recorded()
		if err == nil && there {
			err = fmt.Errorf("the record of %s is still there", name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	reclaimedIn := time.Since(deleted)
	var after float64
	err = eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		v, _, err := e.metric(ctx, reclaimedSample)
		if after = v; err == nil && v < before+1 {
			err = fmt.Errorf("%s = %v, want %v", reclaimedSample, v, before+1)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
	resume()
	f.healed = time.Now()
	out := f.check(t)
	when := fmt.Sprintf("%.1f s after the pod was gone (the entry still out of the conflist)", reclaimedIn.Seconds())
	if early {
		when = "before the test looked (its pass came first)"
	}
	f.report(t, fmt.Sprintf("a chained pod deleted with kube-rdma out of the conflist (its DEL never came), its NIC on the host as %s: pod gone %.1f s after its delete; the daemon's reclaimer (the installed plugin's kube-rdma reclaim) restored %s and removed the record %s; %s %v -> %v",
		returned, terminating.Seconds(), rec.Key, when, reclaimedSample, before, after), out)
}
