package cni

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

var errInjected = errors.New("injected failure")

// failLinks fails the nth Move into a namespace other than the host.
type failLinks struct {
	Links
	host  netns.NsHandle
	nth   int32
	moves atomic.Int32
}

func (f *failLinks) Move(from netns.NsHandle, l rdma.Link, to netns.NsHandle, want rdma.LinkConfig) (rdma.Link, error) {
	if !to.Equal(f.host) && f.moves.Add(1) == f.nth {
		return rdma.Link{}, errInjected
	}
	return f.Links.Move(from, l, to, want)
}

type failIPAM struct{ IPAM }

func (failIPAM) Add(context.Context, string, []byte, IPAMArgs) (types.Result, error) {
	return nil, errInjected
}

type failAddrs struct{ Addresses }

func (failAddrs) Configure(netns.NsHandle, string, []*types100.IPConfig, []*types.Route) error {
	return errInjected
}

// ipamLeases lists the addresses host-local holds for the test network.
func ipamLeases(t *testing.T, e *env) []string {
	ents, _ := os.ReadDir(filepath.Join(e.stateDir, "..", "ipam", "rdma"))
	var out []string
	for _, ent := range ents {
		if net.ParseIP(ent.Name()) != nil {
			out = append(out, ent.Name())
		}
	}
	return out
}

// requireRolledBack checks that a failed ADD left the host, the RDMA
// devices, the state dir and IPAM as in before, and the pod empty.
func requireRolledBack(t *testing.T, e *env, pod *netnstest.NS, before snapshot) {
	t.Helper()
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after rollback (-before +after):\n%s", diff)
	}
	if got := netnstest.Links(t, pod); len(got) != 0 {
		t.Errorf("pod still has %v", got)
	}
	if got := ipamLeases(t, e); len(got) != 0 {
		t.Errorf("host-local still holds %v", got)
	}
}

// TestAddRollback makes each mutating step of ADD fail in turn and checks
// that the host, the RDMA devices, IPAM and the state dir are as before.
func TestAddRollback(t *testing.T) {
	requireHostLocal(t)
	for _, tc := range []struct {
		name   string
		mode   rdma.NetnsMode
		device string
		setup  func(e *env)
	}{
		{name: "move netdev", mode: "shared", device: "mlx5_0", setup: func(e *env) {
			e.p.Links = &failLinks{Links: e.p.Links, host: e.host.Handle, nth: 1}
		}},
		{name: "move a soft device's netdev", mode: "shared", device: "rxe0", setup: func(e *env) {
			e.p.Links = &failLinks{Links: e.p.Links, host: e.host.Handle, nth: 1}
		}},
		{name: "second device's move", mode: "shared", device: "", setup: func(e *env) {
			e.p.Links = &failLinks{Links: e.p.Links, host: e.host.Handle, nth: 2}
		}},
		{name: "rdma device move", mode: "exclusive", device: "mlx5_0", setup: func(e *env) {
			e.rdma.fail = func(m string, ns netns.NsHandle) error {
				if m == "Move" && !ns.Equal(e.host.Handle) {
					return errInjected
				}
				return nil
			}
		}},
		{name: "rxe re-create in pod", mode: "shared", device: "rxe0", setup: func(e *env) {
			e.rdma.fail = func(m string, ns netns.NsHandle) error {
				if m == "AddRxe" && !ns.Equal(e.host.Handle) {
					return errInjected
				}
				return nil
			}
		}},
		{name: "ipam", mode: "exclusive", device: "mlx5_0", setup: func(e *env) { e.p.IPAM = failIPAM{e.p.IPAM} }},
		{name: "address configuration", mode: "exclusive", device: "mlx5_0", setup: func(e *env) {
			e.p.Addrs = failAddrs{e.p.Addrs}
		}},
		{name: "address configuration of a soft device", mode: "shared", device: "rxe0", setup: func(e *env) {
			e.p.Addrs = failAddrs{e.p.Addrs}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2, true, tc.mode)
			h := netnstest.Handle(t, e.host)
			l, _ := h.LinkByName("nic0")
			if err := h.LinkSetMTU(l, 1400); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			pod := netnstest.New(t)
			extra := `"mtu":9000,"mac":"02:00:00:00:00:0b",` + e.ipam("10.11.0.0/24")
			ifName := "net1"
			if tc.device != "" {
				extra += `,"runtimeConfig":{"deviceID":"` + tc.device + `"}`
			} else {
				srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "p", Devices: map[string][]string{"rdma/hca": {"mlx5_0", "mlx5_1"}}})
				e.socket = srv.Socket
				extra = `"resourceName":"rdma/hca",` + e.ipam("10.11.0.0/24")
				ifName = "eth0"
			}
			tc.setup(e)
			before := e.snapshot(pod)
			a := args("c1", pod, ifName, e.conf("1.1.0", extra))
			a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"
			_, err := e.p.Add(context.Background(), a)
			if !errors.Is(err, errInjected) {
				t.Fatalf("ADD error = %v, want the injected failure", err)
			}
			t.Logf("ADD error: %v", err)
			requireRolledBack(t, e, pod, before)
		})
	}
}

// failReturn refuses to move anything back to the host.
type failReturn struct {
	Links
	host netns.NsHandle
}

func (f failReturn) Move(from netns.NsHandle, l rdma.Link, to netns.NsHandle, want rdma.LinkConfig) (rdma.Link, error) {
	if to.Equal(f.host) {
		return rdma.Link{}, errInjected
	}
	return f.Links.Move(from, l, to, want)
}

// TestFailedRollbackKeepsRecord: when the rollback itself fails, the record
// stays so that DEL can finish the job.
func TestFailedRollbackKeepsRecord(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	real := e.p.Links
	e.p.Links = failReturn{Links: real, host: e.host.Handle}
	e.p.Addrs = failAddrs{e.p.Addrs}
	a := args("c1", pod, "net1", e.conf("1.1.0", `"mac":"02:00:00:00:00:0c","runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.13.0.0/24")))
	if _, err := e.p.Add(context.Background(), a); err == nil {
		t.Fatal("ADD succeeded")
	}
	if recs := e.snapshot(pod).Records; len(recs) != 1 {
		t.Fatalf("records after a failed rollback: %v, want the attachment's", recs)
	}
	e.p.Links = real
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after DEL (-before +after):\n%s", diff)
	}
}

// TestAddRollbackWhenFinalSaveFails puts the state dir on a one-page tmpfs:
// the intent record fits, the completed record's temporary file does not
// (ENOSPC, as on a full /var/lib). ADD must then undo every step, including
// IPAM, and remove the intent record.
func TestAddRollbackWhenFinalSaveFails(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 1, false, "exclusive")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", e.stateDir, "tmpfs", 0, "size=4k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(e.stateDir, unix.MNT_DETACH) })
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.14.0.0/24")))
	_, err := e.p.Add(context.Background(), a)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("ADD error = %v, want ENOSPC from the final record save", err)
	}
	t.Logf("ADD error: %v", err)
	requireRolledBack(t, e, pod, before)
}
