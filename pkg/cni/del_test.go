package cni

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestSoftAndExclusiveAddDel: a soft-RoCE device is re-created on its
// netdev in the pod (and, in exclusive mode, moved into the pod's netns)
// and again on the host; in exclusive mode a hardware RDMA device itself
// moves.
func TestSoftAndExclusiveAddDel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    rdma.NetnsMode
		device  string
		wantPod map[string]string
	}{
		{"rxe shared", "shared", "rxe0", map[string]string{"mlx5_0": "host", "rxe0": "pod0/net1"}},
		{"hardware exclusive", "exclusive", "mlx5_0", map[string]string{"mlx5_0": "pod0", "rxe0": "host/rxnic"}},
		{"hardware shared", "shared", "mlx5_0", map[string]string{"mlx5_0": "host", "rxe0": "host/rxnic"}},
		// Soft-RoCE is re-created on the pod's netdev; in exclusive mode the
		// kernel registers it in the host's netns, and it is moved.
		{"rxe exclusive", "exclusive", "rxe0", map[string]string{"mlx5_0": "host", "rxe0": "pod0/net1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, true, tc.mode)
			pod := netnstest.New(t)
			before := e.snapshot(pod)
			a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+tc.device+`"}`))
			mustAdd(t, e, a)
			if diff := cmp.Diff(tc.wantPod, e.snapshot(pod).RDMA); diff != "" {
				t.Errorf("rdma devices after ADD (-want +got):\n%s", diff)
			}
			if err := e.p.Check(context.Background(), a); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("after DEL (-before +after):\n%s", diff)
			}
		})
	}
}

// TestSoftExclusiveKernelCannotMove: a kernel whose rxe cannot change
// netns (EOPNOTSUPP) fails the ADD in exclusive mode with a hint, and the
// rollback leaves the host as it was: its rxe device back on its netdev,
// nothing in the pod, no record.
func TestSoftExclusiveKernelCannotMove(t *testing.T) {
	e := newEnv(t, 0, true, "exclusive")
	e.rdma.softNoMove = true
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"rxe0"}`))
	_, err := e.p.Add(context.Background(), a)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("ADD: %v, want EOPNOTSUPP", err)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after the failed ADD (-before +after):\n%s", diff)
	}
}

// kernelReturns does what the kernel does when a pod netns dies with a
// physical netdev in it: the netdev (down) goes back to the initial netns,
// under its pod name or "devN" when that is taken, and in exclusive mode so
// do the RDMA devices. A veth would be destroyed instead, so the test moves
// it itself, then removes the netns.
func kernelReturns(t *testing.T, e *env, pod *netnstest.NS, podIf, hostName string) {
	t.Helper()
	h := netnstest.Handle(t, pod)
	l, err := h.LinkByName(podIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetDown(l); err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetNsFd(l, int(e.host.Handle)); err != nil {
		t.Fatal(err)
	}
	if hostName != podIf {
		hh := netnstest.Handle(t, e.host)
		l, _ = hh.LinkByName(podIf)
		if err := hh.LinkSetName(l, hostName); err != nil {
			t.Fatal(err)
		}
	}
	e.rdma.mu.Lock()
	for _, d := range e.rdma.devs {
		if d.nsID == pod.Handle.UniqueId() && !d.soft {
			d.nsID = e.host.Handle.UniqueId()
		}
	}
	e.rdma.mu.Unlock()
	if err := pod.Remove(); err != nil {
		t.Fatal(err)
	}
}

// TestDelIdempotent: a second DEL, a DEL without ADD, a DEL without a netns
// and a DEL after the netns is gone all succeed and leave the host as it was
// before ADD, with no state.
func TestDelIdempotent(t *testing.T) {
	for _, dev := range []struct {
		mode rdma.NetnsMode
		id   string
	}{{"exclusive", "mlx5_0"}, {"shared", "rxe0"}} {
		for _, tc := range []struct {
			name  string
			add   bool
			after func(t *testing.T, e *env, pod *netnstest.NS, a *args4)
		}{
			{"second DEL", true, func(t *testing.T, e *env, pod *netnstest.NS, a *args4) {
				if err := e.p.Del(context.Background(), a.del); err != nil {
					t.Fatalf("first DEL: %v", err)
				}
			}},
			{"DEL without ADD", false, nil},
			{"DEL without netns", true, func(t *testing.T, e *env, pod *netnstest.NS, a *args4) {
				kernelReturns(t, e, pod, "net1", "net1")
				a.del.Netns = ""
			}},
			{"DEL after the netns is gone", true, func(t *testing.T, e *env, pod *netnstest.NS, a *args4) {
				hh := netnstest.Handle(t, pod)
				l, _ := hh.LinkByName("net1")
				kernelReturns(t, e, pod, "net1", fmt.Sprintf("dev%d", l.Attrs().Index))
			}},
		} {
			t.Run(dev.id+"/"+tc.name, func(t *testing.T) {
				e := newEnv(t, 1, true, dev.mode)
				h := netnstest.Handle(t, e.host)
				l, _ := h.LinkByName("nic0")
				if err := h.LinkSetMTU(l, 1450); err != nil {
					t.Fatal(err)
				}
				if err := h.LinkSetUp(l); err != nil {
					t.Fatal(err)
				}
				pod := netnstest.New(t)
				before := e.snapshot()
				conf := e.conf("1.1.0", `"mtu":9000,"runtimeConfig":{"deviceID":"`+dev.id+`"}`)
				a := &args4{del: args("c1", pod, "net1", conf)}
				if tc.add {
					mustAdd(t, e, args("c1", pod, "net1", conf))
				}
				if tc.after != nil {
					tc.after(t, e, pod, a)
				}
				if err := e.p.Del(context.Background(), a.del); err != nil {
					t.Fatalf("DEL: %v", err)
				}
				if diff := cmp.Diff(before, e.snapshot()); diff != "" {
					t.Errorf("after DEL (-before +after):\n%s", diff)
				}
			})
		}
	}
}

type args4 struct{ del *skel.CmdArgs }

// TestDelHostNameTaken: the host reused the netdev's name while it was in the
// pod; DEL returns it under a temporary name and says so in the log.
func TestDelHostNameTaken(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	rec, err := attachment.Store{Dir: e.stateDir}.Load(attachment.Key{ContainerID: "c1", IfName: "net1"})
	if err != nil {
		t.Fatal(err)
	}
	netnstest.Veth(t, e.host, "nic0", "squatter")
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	tmp := tempName(rec.Devices[0])
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "got="+tmp) {
		t.Errorf("no warning naming %s in the log:\n%s", tmp, logs.String())
	}
	var found bool
	for _, l := range netnstest.Links(t, e.host) {
		if l.Name == tmp && l.MAC == rec.Devices[0].Host.MAC {
			found = true
		}
	}
	if !found {
		t.Errorf("netdev not returned as %s: host has %v", tmp, netnstest.Links(t, e.host))
	}
	if recs := e.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}

var _ = netns.None

// TestAutoModeAsksTheKernel: with rdmaNetnsMode auto the plugin reads the
// mode, and in exclusive mode moves the RDMA device; the log file gets the
// plugin's lines.
func TestAutoModeAsksTheKernel(t *testing.T) {
	e := newEnv(t, 1, false, "exclusive")
	e.mode = "auto"
	pod := netnstest.New(t)
	logFile := filepath.Join(t.TempDir(), "cni.log")
	e.logFile = logFile // the node's
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	if got := e.snapshot(pod).RDMA["mlx5_0"]; got != "pod0" {
		t.Errorf("mlx5_0 is in %q, want pod0", got)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if got := e.snapshot(pod).RDMA["mlx5_0"]; got != "host" {
		t.Errorf("mlx5_0 is in %q after DEL, want host", got)
	}
	log, err := os.ReadFile(logFile)
	if err != nil || !strings.Contains(string(log), "msg=attached") || !strings.Contains(string(log), "msg=detached") {
		t.Errorf("log file: %v\n%s", err, log)
	}
}

// TestCheckNoticesMissingRDMADevice: CHECK fails when the RDMA device left
// the pod behind the plugin's back.
func TestCheckNoticesMissingRDMADevice(t *testing.T) {
	e := newEnv(t, 1, false, "exclusive")
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	if err := e.rdma.Move(pod.Handle, "mlx5_0", e.host.Handle); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Check(context.Background(), a); err == nil {
		t.Error("CHECK succeeded without the RDMA device in the pod")
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}

// TestDelWithoutAddReleasesIPAM: a DEL without ADD (a runtime cleaning up an
// ADD that failed before the plugin saved anything) still runs IPAM DEL,
// so an address the IPAM plugin handed out is not leaked.
func TestDelWithoutAddReleasesIPAM(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 0, false, "shared")
	pod := netnstest.New(t)
	conf := e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.40.0.0/24"))
	ia := IPAMArgs{ContainerID: "c1", Netns: pod.Path, IfName: "net1", Path: cniPath}
	if _, err := (execIPAM{}).Add(context.Background(), "host-local", conf, ia); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(e.stateDir, "..", "ipam", "rdma", "10.40.0.2")
	if _, err := os.Stat(lease); err != nil {
		t.Fatalf("host-local lease: %v", err)
	}
	if err := e.p.Del(context.Background(), args("c1", pod, "net1", conf)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("lease %s still there after DEL (%v)", lease, err)
	}
}
