package cni

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// prepareShare writes the record of a claim holding a share of mlx5_N
// (a shared pool of frontend dra), as the driver's Prepare does.
func (e draEnv) prepareShare(uid, pod, share string, dev int) {
	e.t.Helper()
	r := claimrecord.Record{UID: uid, Namespace: "ns", Name: "claim-" + uid, PodUIDs: []string{pod}, Devices: []claimrecord.Device{{
		Request: "nic", Pool: "node-a/roce", Device: "pci-" + pciAddr(dev), RDMA: fmt.Sprintf("mlx5_%d", dev), PCIAddress: pciAddr(dev), ShareID: share}}}
	if err := claimrecord.Write(e.claims, r); err != nil {
		e.t.Fatal(err)
	}
}

// TestDRASharedDevice: three claims hold shares of one NIC, each reserved
// for its own pod; each pod gets its own macvlan child of the NIC's netdev,
// with a MAC of its own, while the netdev and the RDMA device stay on the
// host; a fourth pod's claim of another NIC alone moves that NIC. One
// pod's DEL removes its child only.
func TestDRASharedDevice(t *testing.T) {
	e := newDRAEnv(t, 2, "shared")
	pods := []*netnstest.NS{netnstest.New(t), netnstest.New(t), netnstest.New(t)}
	excl := netnstest.New(t)
	before := e.snapshot(append([]*netnstest.NS{excl}, pods...)...)
	uids := []string{"pod-a", "pod-b", "pod-c"}
	for _, uid := range uids {
		e.prepareShare("claim-"+uid, uid, "share-"+uid, 0)
	}
	e.prepare("claim-x", []string{"pod-x"}, 1)

	macs := map[string]bool{}
	for i, pod := range pods {
		a := e.args("c"+uids[i], pod, uids[i], draPrev+`,"sharedNetdev":"macvlan"`)
		mustAdd(t, e.env, a)
		links := netnstest.Links(t, pod)
		if len(links) != 1 || links[0].Name != "net1" {
			t.Fatalf("pod %s links %+v, want one net1", uids[i], links)
		}
		if macs[links[0].MAC] {
			t.Errorf("pod %s's child has MAC %s of another sharer", uids[i], links[0].MAC)
		}
		macs[links[0].MAC] = true
		rec, err := attachment.Store{Dir: e.stateDir}.Load(attachment.Key{ContainerID: "c" + uids[i], IfName: "eth0"})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Devices) != 1 || rec.Devices[0].Child != "macvlan" || rec.Devices[0].RDMA != "mlx5_0" {
			t.Errorf("pod %s's attachment %+v, want a macvlan child of mlx5_0", uids[i], rec.Devices)
		}
	}
	ax := e.args("cx", excl, "pod-x", draPrev+`,"sharedNetdev":"macvlan"`)
	mustAdd(t, e.env, ax)
	if diff := cmp.Diff([]string{"net1"}, linkNames(t, excl)); diff != "" {
		t.Errorf("exclusive claim's pod links (-want +got):\n%s", diff)
	}
	now := e.snapshot()
	if !hasLink(now.Host, "nic0") || hasLink(now.Host, "nic1") {
		t.Errorf("host links %v: want nic0 (shared) on the host, nic1 (exclusive) in its pod", now.Host)
	}

	// The first sharer's DEL (after its Unprepare): its child goes, the
	// others' stay.
	e.unprepare("claim-pod-a")
	a0 := e.args("cpod-a", pods[0], "pod-a", draPrev+`,"sharedNetdev":"macvlan"`)
	if err := e.p.Del(context.Background(), a0); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := netnstest.Links(t, pods[0]); len(got) != 0 {
		t.Errorf("pod a after its DEL: %v", got)
	}
	for i := 1; i < 3; i++ {
		if diff := cmp.Diff([]string{"net1"}, linkNames(t, pods[i])); diff != "" {
			t.Errorf("pod %s after a's DEL (-want +got):\n%s", uids[i], diff)
		}
	}
	for i := 1; i < 3; i++ {
		if err := e.p.Del(context.Background(), e.args("c"+uids[i], pods[i], uids[i], draPrev+`,"sharedNetdev":"macvlan"`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.p.Del(context.Background(), ax); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before.Host, e.snapshot().Host); diff != "" {
		t.Errorf("host after every DEL (-before +after):\n%s", diff)
	}
}

// TestDRASharedDeviceNone: with sharedNetdev none (the default) a claim's
// share of a NIC gives its pod no netdev: the NIC is other pods' too.
func TestDRASharedDeviceNone(t *testing.T) {
	e := newDRAEnv(t, 1, "shared")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	e.prepareShare("claim-a", "pod-a", "share-a", 0)
	a := e.args("ca", pod, "pod-a", draPrev)
	mustAdd(t, e.env, a)
	if got := netnstest.Links(t, pod); len(got) != 0 {
		t.Errorf("pod links %v, want none", got)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("(-before +after ADD):\n%s", diff)
	}
}

func hasLink(links []netnstest.Link, name string) bool {
	for _, l := range links {
		if l.Name == name {
			return true
		}
	}
	return false
}

func linkNames(t *testing.T, ns *netnstest.NS) []string {
	t.Helper()
	var out []string
	for _, l := range netnstest.Links(t, ns) {
		out = append(out, l.Name)
	}
	return out
}
