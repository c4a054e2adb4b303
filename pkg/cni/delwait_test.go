package cni

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// goneAfterAdd attaches mlx5_0 (host nic0: MTU 1450, up) to a pod with MTU
// 9000 and another MAC, then removes the pod's netns path as a runtime does
// when the sandbox dies. The namespace itself lives on in the returned
// netlink handle, with net1 in it: the kernel's netns cleanup, which
// returns a physical NIC to the host, has not run yet. home does it (down,
// into the host netns, renamed to hostName) when the test says so.
func goneAfterAdd(t *testing.T, mode rdma.NetnsMode) (e *env, before snapshot, a *skel.CmdArgs, home func(hostName string) error) {
	t.Helper()
	e, before, a, _, home = goneAfterAddPod(t, mode)
	return e, before, a, home
}

// goneAfterAddPod is goneAfterAdd that also returns the netlink handle of
// the pod's netns (which keeps it alive).
func goneAfterAddPod(t *testing.T, mode rdma.NetnsMode) (e *env, before snapshot, a *skel.CmdArgs, ph *netlink.Handle,
	home func(hostName string) error) {
	t.Helper()
	e = newEnv(t, 1, false, mode)
	h := netnstest.Handle(t, e.host)
	l, _ := h.LinkByName("nic0")
	if err := h.LinkSetMTU(l, 1450); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	pod := netnstest.New(t)
	before = e.snapshot()
	conf := e.conf("1.1.0", `"mtu":9000,"mac":"02:00:00:00:aa:01","runtimeConfig":{"deviceID":"mlx5_0"}`)
	a = args("c1", pod, "net1", conf)
	mustAdd(t, e, a)
	ph = netnstest.Handle(t, pod) // holds the namespace once its path is gone
	podID, hostID := pod.Handle.UniqueId(), e.host.Handle.UniqueId()
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
	home = func(hostName string) error {
		l, err := ph.LinkByName("net1")
		if err != nil {
			return err
		}
		if err := ph.LinkSetDown(l); err != nil {
			return err
		}
		// The kernel renames and moves in one step: rename first, in the
		// pod's netns, so DEL never sees the NIC under its pod name.
		if hostName != "net1" {
			if err := ph.LinkSetName(l, hostName); err != nil {
				return err
			}
		}
		if err := ph.LinkSetNsFd(l, int(e.host.Handle)); err != nil {
			return err
		}
		e.rdma.mu.Lock()
		for _, d := range e.rdma.devs {
			if d.nsID == podID && !d.soft {
				d.nsID = hostID
			}
		}
		e.rdma.mu.Unlock()
		return nil
	}
	return e, before, a, ph, home
}

// TestDelWaitsForNICFromGoneNetns: DEL runs after the pod's netns is gone
// but before the kernel has returned the NIC; the NIC comes back 400 ms
// later as net1 or devN, with the pod's MAC and MTU, down. DEL waits for
// it, restores its name, MAC, MTU and up state, moves nothing else, and
// removes the record. (Without the wait, DEL would log "netdev no longer
// exists" and delete the record, and the NIC would stay net1 with the pod's
// settings, out of a pool that selects it by netdev name.)
func TestDelWaitsForNICFromGoneNetns(t *testing.T) {
	for _, mode := range []rdma.NetnsMode{"exclusive", "shared"} {
		for _, name := range []string{"net1", "dev77"} {
			t.Run(string(mode)+"/"+name, func(t *testing.T) {
				e, before, a, home := goneAfterAdd(t, mode)
				const delay = 400 * time.Millisecond
				homeErr := make(chan error, 1)
				time.AfterFunc(delay, func() { homeErr <- home(name) })
				var logs bytes.Buffer
				e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
				start := time.Now()
				if err := e.p.Del(context.Background(), a); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				took := time.Since(start)
				if err := <-homeErr; err != nil {
					t.Fatalf("returning the NIC: %v", err)
				}
				if diff := cmp.Diff(before, e.snapshot()); diff != "" {
					t.Errorf("after DEL (-before +after):\n%s", diff)
				}
				if took < delay || took > e.p.NetdevReturnWait {
					t.Errorf("DEL took %v, want between the NIC's return (%v) and the bound (%v)", took, delay, e.p.NetdevReturnWait)
				}
				if !strings.Contains(logs.String(), "netdev came back from the pod's netns") {
					t.Errorf("log does not say the netdev came back:\n%s", logs.String())
				}
			})
		}
	}
}

// TestDelNICNeverBack: the NIC does not come back within NetdevReturnWait:
// DEL fails, code 11 (try again later), saying so and that the record is
// kept; the record is there. When the NIC is back, the next DEL restores it
// and removes the record. A NIC whose PCI function is gone from the node
// is not waited for: DEL succeeds at once.
func TestDelNICNeverBack(t *testing.T) {
	e, before, a, home := goneAfterAdd(t, "exclusive")
	e.p.NetdevReturnWait = 300 * time.Millisecond
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	start := time.Now()
	err := e.p.Del(context.Background(), a)
	took := time.Since(start)
	if !errors.Is(err, ErrNetdevNotBack) || cniCode(err) != 11 || !strings.Contains(err.Error(), "record kept") ||
		!strings.Contains(err.Error(), pciAddr(0)) {
		t.Fatalf("DEL = %v (code %d), want ErrNetdevNotBack, code 11, naming the PCI address and the record kept", err, cniCode(err))
	}
	if took < e.p.NetdevReturnWait || took > e.p.NetdevReturnWait+time.Second {
		t.Errorf("DEL took %v, want about the bound (%v)", took, e.p.NetdevReturnWait)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"netdev has not come back from the pod's netns; record kept\"") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}
	if recs := e.snapshot().Records; len(recs) != 1 {
		t.Fatalf("records after the failed DEL: %v, want the attachment's", recs)
	}
	if err := home("dev5"); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Errorf("after the second DEL (-before +after):\n%s", diff)
	}

	// The PCI function is gone (hot-unplugged, a VF destroyed): nothing
	// will come back.
	e2, _, a2, _ := goneAfterAdd(t, "shared")
	if err := os.Remove(filepath.Join(e2.sys, "bus/pci/devices", pciAddr(0))); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := e2.p.Del(context.Background(), a2); err != nil {
		t.Fatalf("DEL of a NIC whose PCI function is gone: %v", err)
	}
	if took := time.Since(start); took > e2.p.NetdevReturnWait/2 {
		t.Errorf("DEL of a NIC whose PCI function is gone took %v: it waited", took)
	}
	if recs := e2.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}
