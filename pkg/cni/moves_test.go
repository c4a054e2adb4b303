package cni

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// countingLinks counts netdev moves between namespaces.
type countingLinks struct {
	Links
	moves atomic.Int32
}

func (c *countingLinks) Move(from netns.NsHandle, l rdma.Link, to netns.NsHandle, want rdma.LinkConfig) (rdma.Link, error) {
	c.moves.Add(1)
	return c.Links.Move(from, l, to, want)
}

// TestOneMovePerDirection: a netns move costs the kernel an RCU grace
// period, so ADD moves each netdev once (rename, MTU, MAC and up state in
// the same request) and DEL once.
func TestOneMovePerDirection(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	links := &countingLinks{Links: e.p.Links}
	e.p.Links = links
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"mtu":9000,"mac":"02:00:00:00:00:0b","runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	if n := links.moves.Load(); n != 1 {
		t.Errorf("ADD moved %d times, want 1", n)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if n := links.moves.Load(); n != 2 {
		t.Errorf("ADD+DEL moved %d times, want 2", n)
	}
}

// TestSoftDeviceNameWait: the kernel frees a soft-RoCE device's name
// asynchronously after its netdev left; ADD retries the re-creation in the
// pod until SoftRDMAWait, and past it creates the device under another name.
func TestSoftDeviceNameWait(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken int32 // AddRxe attempts in the pod answered "name taken"
		want  string
	}{
		{"freed in time", 3, "rxe0"},
		{"never freed", 1 << 30, "rxe0_net1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 0, true, "shared")
			pod := netnstest.New(t)
			// The fake calls fail with its lock held: the stand-in for the
			// device being unregistered holds the name for tc.taken attempts.
			var calls int32
			e.rdma.fail = func(m string, ns netns.NsHandle) error {
				if m != "AddRxe" || ns.UniqueId() != pod.Handle.UniqueId() {
					return nil
				}
				if calls++; calls <= tc.taken {
					e.rdma.devs["rxe0"] = &fakeDev{nsID: "unregistering"}
				} else if d := e.rdma.devs["rxe0"]; d != nil && d.nsID == "unregistering" {
					delete(e.rdma.devs, "rxe0")
				}
				return nil
			}
			a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"rxe0"}`))
			mustAdd(t, e, a)
			e.rdma.mu.Lock()
			e.rdma.fail = nil
			if d := e.rdma.devs["rxe0"]; d != nil && d.nsID == "unregistering" {
				delete(e.rdma.devs, "rxe0")
			}
			e.rdma.mu.Unlock()
			if got := e.snapshot(pod).RDMA[tc.want]; got != "pod0/net1" {
				t.Errorf("%s is at %q, want pod0/net1", tc.want, got)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatal(err)
			}
		})
	}
}
