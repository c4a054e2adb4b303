package rdma_test

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

func TestMoveRenamesAndConfiguresInOneStep(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "nic0p")
	var d rdma.Netdevs
	orig, err := d.Get(host.Handle, "nic0")
	if err != nil {
		t.Fatal(err)
	}
	mac, _ := net.ParseMAC("02:00:00:00:00:42")
	start := time.Now()
	got, err := d.Move(host.Handle, orig, pod.Handle, rdma.LinkConfig{Name: "net1", MTU: 9000, MAC: mac, Up: true})
	if err != nil {
		t.Fatal(err)
	}
	if read, err := d.Get(pod.Handle, "net1"); err != nil || read != got {
		t.Errorf("Move returned %+v, the kernel says %+v (%v)", got, read, err)
	}
	t.Logf("move+rename+mtu+mac+up: %v", time.Since(start))
	want := rdma.Link{Name: "net1", Index: got.Index, MTU: 9000, MAC: "02:00:00:00:00:42", Up: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pod link (-want +got):\n%s", diff)
	}
	if _, err := d.Get(host.Handle, "nic0"); !errors.Is(err, rdma.ErrLinkNotFound) {
		t.Errorf("nic0 still in host netns: %v", err)
	}
	back, err := d.Move(pod.Handle, got, host.Handle, rdma.LinkConfig{Name: "nic0", MTU: orig.MTU, MAC: mustMAC(orig.MAC), Up: false})
	if err != nil {
		t.Fatal(err)
	}
	orig.Index = back.Index
	if diff := cmp.Diff(orig, back); diff != "" {
		t.Errorf("host link after return (-want +got):\n%s", diff)
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// Each case makes a step that the kernel applies after the namespace move
// fail, and checks that Move puts the device back as it was.
func TestMoveFailureLeavesDeviceHome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     rdma.LinkConfig
		podVeth string // a link already in the pod netns
	}{
		{name: "name taken in pod", cfg: rdma.LinkConfig{Name: "taken", Up: true}, podVeth: "taken"},
		{name: "mtu too large", cfg: rdma.LinkConfig{Name: "net1", MTU: 70000, Up: true}},
		{name: "multicast mac", cfg: rdma.LinkConfig{Name: "net1", MAC: mustMAC("01:00:5e:00:00:01"), Up: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host, pod := netnstest.New(t), netnstest.New(t)
			netnstest.Veth(t, host, "nic0", "nic0p")
			h := netnstest.Handle(t, host)
			nl, _ := h.LinkByName("nic0")
			if err := h.LinkSetMTU(nl, 1400); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(nl); err != nil {
				t.Fatal(err)
			}
			if tc.podVeth != "" {
				netnstest.Veth(t, pod, tc.podVeth, tc.podVeth+"p")
			}
			before := netnstest.Links(t, host)
			var d rdma.Netdevs
			l, err := d.Get(host.Handle, "nic0")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.Move(host.Handle, l, pod.Handle, tc.cfg); err == nil {
				t.Fatal("Move succeeded, want an error")
			} else {
				t.Logf("error: %v", err)
			}
			if diff := cmp.Diff(before, netnstest.Links(t, host)); diff != "" {
				t.Errorf("host links (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRDMAReportsMissingNetlink(t *testing.T) {
	host := netnstest.New(t)
	_, err := rdma.Devices{}.NetnsMode(host.Handle)
	if err == nil {
		t.Skip("this kernel has RDMA netlink; the missing-RDMA path cannot be exercised")
	}
	if !errors.Is(err, rdma.ErrNoRDMA) {
		t.Errorf("NetnsMode error = %v, want ErrNoRDMA", err)
	}
}

func TestSetRenamesAnUpDevice(t *testing.T) {
	host := netnstest.New(t)
	netnstest.Veth(t, host, "dev7", "dev7p")
	h := netnstest.Handle(t, host)
	l, _ := h.LinkByName("dev7")
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	var d rdma.Netdevs
	got, err := d.Set(host.Handle, "dev7", rdma.LinkConfig{Name: "nic0", MTU: 1400, Up: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "nic0" || got.MTU != 1400 || !got.Up {
		t.Errorf("Set = %+v", got)
	}
	// A failing Set leaves the device up under its name.
	if _, err := d.Set(host.Handle, "nic0", rdma.LinkConfig{Name: "nic1", MTU: 70000, Up: true}); err == nil {
		t.Fatal("Set with MTU 70000 succeeded")
	}
	if got, err := d.Get(host.Handle, "nic0"); err != nil || !got.Up {
		t.Errorf("after a failed Set: %+v, %v", got, err)
	}
}
