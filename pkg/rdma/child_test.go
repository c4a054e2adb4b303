package rdma_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Two pods' macvlan children of one parent: each created in its pod's netns
// under its name, up, with its own MAC; deleting them leaves the parent as
// it was, and a second delete is nothing.
func TestAddChildMacvlan(t *testing.T) {
	host, pod1, pod2 := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "nic0p")
	var d rdma.Netdevs
	parent, err := d.Get(host.Handle, "nic0")
	if err != nil {
		t.Fatal(err)
	}
	hostBefore := netnstest.Links(t, host)
	c1, err := d.AddChild(host.Handle, "nic0", pod1.Handle, rdma.ChildConfig{Kind: rdma.ChildMacvlan, Name: "net1", MTU: 1400,
		MAC: mustMAC("02:00:00:00:00:11")})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := d.AddChild(host.Handle, "nic0", pod2.Handle, rdma.ChildConfig{Kind: rdma.ChildMacvlan, Name: "net1"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (rdma.Link{Name: "net1", Index: c1.Index, MTU: 1400, MAC: "02:00:00:00:00:11", Up: true}); c1 != want {
		t.Errorf("child 1 = %+v, want %+v", c1, want)
	}
	if c2.MAC == c1.MAC || c2.MAC == parent.MAC || !c2.Up || c2.MTU != parent.MTU {
		t.Errorf("child 2 = %+v (child 1 %+v, parent %+v): want up, its own MAC, the parent's MTU", c2, c1, parent)
	}
	if diff := cmp.Diff(hostBefore, netnstest.Links(t, host)); diff != "" {
		t.Errorf("host links changed by creating children (-before +after):\n%s", diff)
	}
	// Another pod's child is not deleted by a MAC that is not its.
	if del, err := d.Delete(pod2.Handle, "net1", c1.MAC); err != nil || del {
		t.Errorf("Delete with another MAC = %v, %v; want false, nil", del, err)
	}
	for _, p := range []struct {
		ns  *netnstest.NS
		mac string
	}{{pod1, c1.MAC}, {pod2, c2.MAC}} {
		if del, err := d.Delete(p.ns.Handle, "net1", p.mac); err != nil || !del {
			t.Fatalf("Delete = %v, %v; want true, nil", del, err)
		}
		if _, err := d.Get(p.ns.Handle, "net1"); !errors.Is(err, rdma.ErrLinkNotFound) {
			t.Errorf("child still in the pod: %v", err)
		}
		if del, err := d.Delete(p.ns.Handle, "net1", p.mac); err != nil || del {
			t.Errorf("second Delete = %v, %v; want false, nil", del, err)
		}
	}
	if diff := cmp.Diff(hostBefore, netnstest.Links(t, host)); diff != "" {
		t.Errorf("host links after the children went (-before +after):\n%s", diff)
	}
}

// A name taken in the pod, or a parent that is not there, creates nothing.
func TestAddChildFailsCleanly(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "nic0p")
	netnstest.Veth(t, pod, "net1", "other")
	var d rdma.Netdevs
	podBefore := netnstest.Links(t, pod)
	if _, err := d.AddChild(host.Handle, "nic0", pod.Handle, rdma.ChildConfig{Kind: rdma.ChildMacvlan, Name: "net1"}); err == nil {
		t.Error("child under a taken name: no error")
	}
	if _, err := d.AddChild(host.Handle, "nope0", pod.Handle, rdma.ChildConfig{Kind: rdma.ChildMacvlan, Name: "net2"}); !errors.Is(err, rdma.ErrLinkNotFound) {
		t.Errorf("child of a missing parent: %v, want ErrLinkNotFound", err)
	}
	if diff := cmp.Diff(podBefore, netnstest.Links(t, pod)); diff != "" {
		t.Errorf("pod links (-before +after):\n%s", diff)
	}
}
