package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// sharedEnv is an env whose n NICs are the members of shared device plugin
// pool "roce" (resource "rdma.kube-rdma.io/roce"), and a kubelet that gave
// each named pod one slot of it.
func sharedEnv(t testing.TB, n int, pods ...string) *env {
	t.Helper()
	e := newEnv(t, n, false, "shared")
	pool := nodepools.Pool{Name: "roce", Mode: nodepools.ModeShared, Frontend: "devicePlugin"}
	for i := range n {
		pool.Devices = append(pool.Devices, nodepools.Device{RDMA: fmt.Sprintf("mlx5_%d", i), PCIAddress: pciAddr(i)})
	}
	e.writePools(nodepools.File{Pools: []nodepools.Pool{pool}})
	var ps []podrestest.Pod
	for i, name := range pods {
		ps = append(ps, podrestest.Pod{Namespace: "ns", Name: name,
			Devices: map[string][]string{"rdma.kube-rdma.io/roce": {nodepools.SlotID("roce", i)}}})
	}
	e.socket = podrestest.Start(t, ps...).Socket
	return e
}

func podArgsOf(name string) string {
	return "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + name + ";K8S_POD_UID=uid-" + name
}

// TestSharedTwoPods: two pods holding slots of one shared pool of two NICs
// (chained, resourceName) each get a macvlan child of both NICs' netdevs,
// with their own MACs and addresses; the host's links, the RDMA devices and
// the parents stay as they were. CHECK passes; DEL removes each pod's
// children only, and is idempotent, also with the netns gone (its IPAM
// leases released).
func TestSharedTwoPods(t *testing.T) {
	requireHostLocal(t)
	e := sharedEnv(t, 2, "a", "b")
	pa, pb := netnstest.New(t), netnstest.New(t)
	before := e.snapshot(pa, pb)
	conf := e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan",`+e.ipam("10.20.0.0/24"))
	aa, ab := args("ca", pa, "eth0", conf), args("cb", pb, "eth0", conf)
	aa.Args, ab.Args = podArgsOf("a"), podArgsOf("b")
	ra, rb := mustAdd(t, e, aa), mustAdd(t, e, ab)

	var macs, ips []string
	for _, pod := range []*netnstest.NS{pa, pb} {
		links := netnstest.Links(t, pod)
		var names []string
		for _, l := range links {
			names = append(names, l.Name)
			macs = append(macs, l.MAC)
			if !l.Up || l.MTU != 1500 {
				t.Errorf("pod link %+v: want up, the parent's MTU", l)
			}
			addrs, err := rdma.Addresses{}.List(pod.Handle, l.Name)
			if err != nil || len(addrs) != 1 {
				t.Fatalf("%s addresses = %v, %v", l.Name, addrs, err)
			}
			ips = append(ips, addrs[0].IP.String())
		}
		if diff := cmp.Diff([]string{"net1", "net2"}, names); diff != "" {
			t.Errorf("pod links (-want +got):\n%s", diff)
		}
	}
	hostMACs := map[string]bool{}
	for _, l := range before.Host {
		hostMACs[l.MAC] = true
	}
	for i, m := range macs {
		if hostMACs[m] || slices.Contains(macs[:i], m) {
			t.Errorf("child MACs %v: %s is not the child's own", macs, m)
		}
	}
	slices.Sort(ips)
	if diff := cmp.Diff([]string{"10.20.0.2", "10.20.0.3", "10.20.0.4", "10.20.0.5"}, ips); diff != "" {
		t.Errorf("pod addresses (-want +got):\n%s", diff)
	}
	if len(ra.Interfaces) != 2 || len(rb.Interfaces) != 2 || ra.Interfaces[0].PciID != pciAddr(0) || ra.Interfaces[0].Mac == "" {
		t.Errorf("results: %+v, %+v", ra.Interfaces, rb.Interfaces)
	}
	if diff := cmp.Diff(before.Host, e.snapshot().Host); diff != "" {
		t.Errorf("host links with two sharers (-before +now):\n%s", diff)
	}
	if diff := cmp.Diff(before.RDMA, e.snapshot(pa, pb).RDMA); diff != "" {
		t.Errorf("rdma devices moved (-before +now):\n%s", diff)
	}
	store := attachment.Store{Dir: e.stateDir, BootID: "test-boot"}
	rec, err := store.Load(attachment.Key{ContainerID: "ca", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range rec.Devices {
		if d.Child != "macvlan" || d.Host.Name != fmt.Sprintf("nic%d", i) || d.RDMAExclusive || d.PodMAC == "" || !d.IPAM {
			t.Errorf("record device %d = %+v; want a macvlan child of nic%d", i, d, i)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.stateDir, "ca_eth0.json")); !strings.Contains(string(b), `"schema": 2,`) {
		t.Errorf("a record with children is not schema 2:\n%s", b)
	}
	checkA := e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan",`+e.ipam("10.20.0.0/24"))
	if err := e.p.Check(context.Background(), args("ca", pa, "eth0", checkA)); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	// DEL of a: its children go, b's stay; twice is nothing.
	for range 2 {
		if err := e.p.Del(context.Background(), aa); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
	if got := netnstest.Links(t, pa); len(got) != 0 {
		t.Errorf("pod a still has %v", got)
	}
	if got := netnstest.Links(t, pb); len(got) != 2 {
		t.Errorf("pod b's children after a's DEL: %v", got)
	}
	// b's netns goes first (the runtime tore the sandbox down): DEL
	// releases its leases and removes its record; its children died with it.
	if err := pb.Remove(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.p.Del(context.Background(), ab); err != nil {
			t.Fatalf("DEL with the netns gone: %v", err)
		}
	}
	if l := e.leases(t); len(l) != 0 {
		t.Errorf("leases after DEL: %v", l)
	}
	after := e.snapshot()
	if diff := cmp.Diff(before.Host, after.Host); diff != "" || len(after.Records) != 0 {
		t.Errorf("host after both DELs (-before +after):\n%s\nrecords %v", diff, after.Records)
	}
}

// TestSharedDeviceID: with Multus, the deviceID is the kubelet's: a slot of
// the shared pool (one NIC: a child of it as CNI_IFNAME), or a NIC of the
// pool whose slot the pod holds; a slot of a pool of several NICs is
// refused (7), a slot the pod does not hold too (102).
func TestSharedDeviceID(t *testing.T) {
	e := sharedEnv(t, 1, "a", "b")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	for _, tc := range []struct {
		name, deviceID, pod string
		wantCode            uint
	}{
		{"slot", nodepools.SlotID("roce", 0), "a", 0},
		{"nic of a slot held", "mlx5_0", "b", 0},
		{"slot of another pod", nodepools.SlotID("roce", 1), "a", CodeNotAllocated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := args("c-"+tc.pod, pod, "net1", e.conf("1.1.0", `"sharedNetdev":"macvlan","runtimeConfig":{"deviceID":"`+tc.deviceID+`"}`))
			a.Args = podArgsOf(tc.pod)
			_, err := e.p.Add(context.Background(), a)
			if cniCode(err) != tc.wantCode {
				t.Fatalf("ADD = %v (code %d), want code %d", err, cniCode(err), tc.wantCode)
			}
			if err != nil {
				return
			}
			links := netnstest.Links(t, pod)
			if len(links) != 1 || links[0].Name != "net1" {
				t.Errorf("pod links = %v, want net1", links)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("after DEL (-before +after):\n%s", diff)
			}
		})
	}
	t.Run("slot of a pool of two NICs", func(t *testing.T) {
		e := sharedEnv(t, 2, "a")
		a := args("c", pod, "net1", e.conf("1.1.0", `"sharedNetdev":"macvlan","runtimeConfig":{"deviceID":"roce-0"}`))
		a.Args = podArgsOf("a")
		_, err := e.p.Add(context.Background(), a)
		if cniCode(err) != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), "resourceName") {
			t.Errorf("ADD = %v (code %d), want 7 saying what to do", err, cniCode(err))
		}
	})
}

// TestSharedAndExclusiveExclude: a NIC with children is not moved into a
// pod (an exclusive pool overlapping the shared one, 101); a NIC moved into
// a pod gets no child; sharedNetdev none gives nothing.
func TestSharedAndExclusiveExclude(t *testing.T) {
	e := sharedEnv(t, 1, "a")
	pod, other := netnstest.New(t), netnstest.New(t)
	e.writePools(nodepools.File{Pools: []nodepools.Pool{
		{Name: "roce", Mode: nodepools.ModeShared, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr(0)}}},
		{Name: "excl", Mode: nodepools.ModeExclusive, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr(0)}}},
	}})
	child := args("c1", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan"`))
	child.Args = podArgsOf("a")
	mustAdd(t, e, child)
	move := args("c2", other, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	if _, err := e.p.Add(context.Background(), move); !errors.Is(err, ErrDeviceInUse) {
		t.Errorf("move of a NIC with children: %v, want ErrDeviceInUse", err)
	}
	if err := e.p.Del(context.Background(), child); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e, move)
	if _, err := e.p.Add(context.Background(), child); !errors.Is(err, ErrDeviceInUse) {
		t.Errorf("child of a NIC moved into a pod: %v, want ErrDeviceInUse", err)
	}
	if err := e.p.Del(context.Background(), move); err != nil {
		t.Fatal(err)
	}
	before := e.snapshot(pod)
	none := args("c3", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"none"`))
	none.Args = podArgsOf("a")
	if res := mustAdd(t, e, none); len(res.Interfaces) != 0 {
		t.Errorf("sharedNetdev none: result %+v", res)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("sharedNetdev none changed something (-before +after):\n%s", diff)
	}
}

// TestSharedRollback: an ADD that fails after the children exist (IPAM
// fails) deletes them and its record; GC deletes the children of an
// attachment the runtime no longer has; the daemon's reclaim of one whose
// netns is gone releases its lease and removes its record.
func TestSharedRollback(t *testing.T) {
	requireHostLocal(t)
	e := sharedEnv(t, 2, "a")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	bad := args("c1", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan","ipam":{"type":"no-such-ipam"}`))
	bad.Args = podArgsOf("a")
	if _, err := e.p.Add(context.Background(), bad); err == nil {
		t.Fatal("ADD with a missing IPAM plugin succeeded")
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after the failed ADD (-before +after):\n%s", diff)
	}

	conf := e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan",`+e.ipam("10.21.0.0/24"))
	a := args("c2", pod, "eth0", conf)
	a.Args = podArgsOf("a")
	mustAdd(t, e, a)
	gc := args("", nil, "", e.conf("1.1.0", e.ipam("10.21.0.0/24")+`,"cni.dev/valid-attachments":[]`))
	if err := e.p.GC(context.Background(), gc); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got, l := netnstest.Links(t, pod), e.leases(t); len(got) != 0 || len(l) != 0 {
		t.Errorf("after GC: pod links %v, leases %v", got, l)
	}

	mustAdd(t, e, a)
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	store := attachment.Store{Dir: e.stateDir, BootID: "test-boot"}
	rec, err := store.Load(attachment.Key{ContainerID: "c2", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	if e.p.ReturnedByKernel(rec) {
		t.Error("ReturnedByKernel of children: true; nothing of a child comes back")
	}
	res := e.p.Reclaim(context.Background(), ReclaimOpts{Store: store, CNIPath: cniPath, SysfsRoot: e.sys}, []attachment.Key{rec.Key})
	if len(res) != 1 || res[0].Err != nil || res[0].Skipped != "" {
		t.Fatalf("Reclaim = %+v", res)
	}
	after := e.snapshot()
	if diff := cmp.Diff(before.Host, after.Host); diff != "" || len(after.Records) != 0 || len(e.leases(t)) != 0 {
		t.Errorf("after reclaim: host (-before +after)\n%s\nrecords %v, leases %v", diff, after.Records, e.leases(t))
	}
}

// recordingLinks records the children asked for, and fails them as a
// kernel without the link type does.
type recordingLinks struct {
	Links
	asked []rdma.ChildConfig
	err   error
}

func (r *recordingLinks) AddChild(parentNS netns.NsHandle, parent string, to netns.NsHandle, c rdma.ChildConfig) (rdma.Link, error) {
	r.asked = append(r.asked, c)
	if r.err != nil {
		return rdma.Link{}, r.err
	}
	return r.Links.AddChild(parentNS, parent, to, c)
}

// TestSharedChildKinds: sharedNetdev ipvlan asks for an ipvlan child (this
// host's kernel has no ipvlan: the ADD fails and leaves nothing, or, on a
// kernel with it, the child has its parent's MAC); an InfiniBand NIC's pod
// gets an IPoIB child in the parent's partition (no IPoIB here: the request
// is checked, byte for byte, in pkg/rdma's TestChildRequest; here that the
// plugin asks for it with the parent's pkey and rolls back when it fails).
func TestSharedChildKinds(t *testing.T) {
	e := sharedEnv(t, 1, "a")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	rec := &recordingLinks{Links: e.p.Links}
	e.p.Links = rec
	a := args("c1", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"ipvlan"`))
	a.Args = podArgsOf("a")
	_, err := e.p.Add(context.Background(), a)
	if diff := cmp.Diff([]rdma.ChildConfig{{Kind: rdma.ChildIPVLAN, Name: "net1"}}, rec.asked); diff != "" {
		t.Errorf("children asked (-want +got):\n%s", diff)
	}
	if err == nil {
		parent, _ := e.p.Links.Get(e.host.Handle, "nic0")
		if l := netnstest.Links(t, pod); len(l) != 1 || l[0].MAC != parent.MAC {
			t.Errorf("ipvlan child %v: want the parent's MAC %s", l, parent.MAC)
		}
		if err := e.p.Del(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("ipvlan on this kernel: %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after ipvlan ADD (and DEL) (-before +after):\n%s", diff)
	}

	// mlx5_0's port turns InfiniBand, nic0 an IPoIB netdev in partition 0x8001.
	if err := os.WriteFile(filepath.Join(e.sys, "class/infiniband/mlx5_0/ports/1/link_layer"), []byte("InfiniBand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.sys, "class/net/nic0/pkey"), []byte("0x8001\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec.asked, rec.err = nil, errors.New("ipoib: no such link type on this kernel")
	a = args("c2", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan"`))
	a.Args = podArgsOf("a")
	if _, err := e.p.Add(context.Background(), a); err == nil {
		t.Error("ADD succeeded with AddChild failing")
	}
	if diff := cmp.Diff([]rdma.ChildConfig{{Kind: rdma.ChildIPoIB, Name: "net1", PKey: 0x8001}}, rec.asked); diff != "" {
		t.Errorf("children asked on InfiniBand (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after the failed IPoIB ADD (-before +after):\n%s", diff)
	}
	// IPoIB is the link layer's choice, not a setting.
	if _, err := netconf.Parse(e.conf("1.1.0", `"sharedNetdev":"ipoib"`), e.node()); cniCode(err) != types.ErrInvalidNetworkConfig {
		t.Errorf("sharedNetdev ipoib: %v, want code 7 (IPoIB is chosen by the link layer)", err)
	}
}
