package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// These tests run ADD and DEL in DRA mode on real network namespaces with
// veth links standing in for the NICs' netdevs. The records are written
// with claimrecord.Write, as pkg/dra's Prepare writes them (pkg/dra's tests
// check what Prepare puts in them). In exclusive mode the RDMA devices are
// fakeRDMA's (env_test.go): this kernel has no RDMA netlink.

// draPrev is a primary network's result: the plugin is chained after it.
const draPrev = `"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}],"ips":[{"address":"10.0.0.5/24","interface":0}]}`

// draEnv is an env with a claims dir.
type draEnv struct {
	*env
	claims string
}

func newDRAEnv(t *testing.T, hw int, mode rdma.NetnsMode) draEnv {
	return draEnv{env: newEnv(t, hw, false, mode), claims: filepath.Join(t.TempDir(), "claims")}
}

// prepare writes the record of a claim reserved for pods with the given
// mlx5_N devices, as the driver's Prepare does.
func (e draEnv) prepare(uid string, pods []string, devs ...int) {
	e.t.Helper()
	r := claimrecord.Record{UID: uid, Namespace: "ns", Name: "claim-" + uid, PodUIDs: pods}
	for _, i := range devs {
		r.Devices = append(r.Devices, claimrecord.Device{Request: "nic", Pool: "node-a/ib", Device: "pci-" + pciAddr(i),
			RDMA: fmt.Sprintf("mlx5_%d", i), PCIAddress: pciAddr(i)})
	}
	if err := claimrecord.Write(e.claims, r); err != nil {
		e.t.Fatal(err)
	}
}

func (e draEnv) unprepare(uid string) {
	e.t.Helper()
	if err := claimrecord.Remove(e.claims, uid); err != nil {
		e.t.Fatal(err)
	}
}

// args are a command's for pod podUID in DRA mode; extra is spliced into
// the netconf (draPrev: chained).
func (e draEnv) args(id string, pod *netnstest.NS, podUID, extra string) *skel.CmdArgs {
	e.env.claims = e.claims // the node's claims dir is this env's
	conf := `"draClaimsDir":"` + e.claims + `"`
	if extra != "" {
		conf += "," + extra
	}
	a := args(id, pod, "eth0", e.conf("1.0.0", conf))
	a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p-" + podUID + ";K8S_POD_UID=" + podUID
	return a
}

// TestDRAAttach: a pod whose claim record names two NICs gets both
// netdevs (and in exclusive mode both RDMA devices) as net1 and net2; an
// admin-access result of another claim is not moved; DEL puts everything
// back; Unprepare before DEL (the kubelet's order is not guaranteed) does
// not stop DEL from restoring the host.
func TestDRAAttach(t *testing.T) {
	for _, mode := range []rdma.NetnsMode{"shared", "exclusive"} {
		t.Run(string(mode), func(t *testing.T) {
			e := newDRAEnv(t, 3, mode)
			pod := netnstest.New(t)
			before := e.snapshot(pod)
			e.prepare("claim-1", []string{"pod-a"}, 2, 0)
			admin := claimrecord.Record{UID: "claim-admin", Namespace: "ns", Name: "admin", PodUIDs: []string{"pod-a"},
				Devices: []claimrecord.Device{{Request: "nic", Pool: "node-a/ib", Device: "pci-x", AdminAccess: true, RDMA: "mlx5_1", PCIAddress: pciAddr(1)}}}
			if err := claimrecord.Write(e.claims, admin); err != nil {
				t.Fatal(err)
			}
			e.prepare("claim-other", []string{"pod-b"}, 1)

			a := e.args("c1", pod, "pod-a", draPrev)
			res := mustAdd(t, e.env, a)
			var names []string
			for _, i := range res.Interfaces {
				names = append(names, i.Name)
			}
			if diff := cmp.Diff([]string{"eth0", "net1", "net2"}, names); diff != "" {
				t.Errorf("result interfaces (-want +got):\n%s", diff)
			}
			var inPod []string
			for _, l := range netnstest.Links(t, pod) {
				inPod = append(inPod, l.Name)
			}
			if diff := cmp.Diff([]string{"net1", "net2"}, inPod); diff != "" {
				t.Errorf("pod netdevs (-want +got):\n%s", diff)
			}
			rec, err := attachment.Store{Dir: e.stateDir}.Load(attachment.Key{ContainerID: "c1", IfName: "eth0"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range rec.Devices {
				got = append(got, d.RDMA+"="+d.PodIfName)
			}
			if diff := cmp.Diff([]string{"mlx5_0=net1", "mlx5_2=net2"}, got); diff != "" {
				t.Errorf("attachment devices (-want +got):\n%s", diff)
			}
			wantRDMA := map[string]string{"mlx5_0": "host", "mlx5_1": "host", "mlx5_2": "host"}
			if mode == "exclusive" {
				wantRDMA["mlx5_0"], wantRDMA["mlx5_2"] = "pod0", "pod0"
			}
			if diff := cmp.Diff(wantRDMA, e.snapshot(pod).RDMA); diff != "" {
				t.Errorf("rdma devices (-want +got):\n%s", diff)
			}
			if err := e.p.Check(context.Background(), a); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			// The kubelet unprepares the claim before the runtime's DEL.
			e.unprepare("claim-1")
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatalf("DEL after Unprepare: %v", err)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("after DEL (-before +after):\n%s", diff)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Errorf("second DEL: %v", err)
			}
		})
	}
}

// TestDRADelThenUnprepare: the usual order, DEL then Unprepare; and a
// device prepared again for the next pod attaches there.
func TestDRADelThenUnprepare(t *testing.T) {
	e := newDRAEnv(t, 1, "exclusive")
	podA, podB := netnstest.New(t), netnstest.New(t)
	before := e.snapshot()
	e.prepare("claim-a", []string{"pod-a"}, 0)
	a := e.args("a", podA, "pod-a", draPrev)
	mustAdd(t, e.env, a)
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	e.unprepare("claim-a")
	e.unprepare("claim-a") // the kubelet retries
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Errorf("after DEL and Unprepare (-before +after):\n%s", diff)
	}
	e.prepare("claim-b", []string{"pod-b"}, 0)
	b := e.args("b", podB, "pod-b", draPrev)
	mustAdd(t, e.env, b)
	if got := netnstest.Links(t, podB); len(got) != 1 || got[0].Name != "net1" {
		t.Errorf("pod b links %v, want net1", got)
	}
	if err := e.p.Del(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// TestDRASecondPodRefused: a claim reserved for two pods (a shared claim)
// gives its NIC's netdev to the first ADD; the second pod's ADD is refused
// with code 101 and changes nothing, and succeeds once the first is gone.
func TestDRASecondPodRefused(t *testing.T) {
	e := newDRAEnv(t, 2, "exclusive")
	podA, podB := netnstest.New(t), netnstest.New(t)
	e.prepare("shared", []string{"pod-a", "pod-b"}, 1)
	a := e.args("a", podA, "pod-a", draPrev)
	mustAdd(t, e.env, a)
	held := e.snapshot(podA, podB)
	b := e.args("b", podB, "pod-b", draPrev)
	_, err := e.p.Add(context.Background(), b)
	if !errors.Is(err, ErrDeviceInUse) || cniCode(err) != CodeDeviceInUse {
		t.Fatalf("second pod's ADD = %v, want ErrDeviceInUse (%d)", err, CodeDeviceInUse)
	}
	t.Logf("ADD error: %v", err)
	if diff := cmp.Diff(held, e.snapshot(podA, podB)); diff != "" {
		t.Errorf("refused ADD changed something (-before +after):\n%s", diff)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e.env, b) // the kubelet retries the sandbox
	if err := e.p.Del(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// TestDRAErrors: what an ADD in DRA mode answers when it cannot attach,
// each before any change.
func TestDRAErrors(t *testing.T) {
	e := newDRAEnv(t, 1, "shared")
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	e.prepare("claim-1", []string{"pod-a"}, 0)
	gone := claimrecord.Record{UID: "claim-gone", Namespace: "ns", Name: "gone", PodUIDs: []string{"pod-gone"},
		Devices: []claimrecord.Device{{Request: "nic", Pool: "node-a/ib", Device: "pci-0000-ff-00-0", RDMA: "mlx5_9", PCIAddress: "0000:ff:00.0"}}}
	old := claimrecord.Record{UID: "claim-old", Namespace: "ns", Name: "old", PodUIDs: []string{"pod-old"},
		Devices: []claimrecord.Device{{Request: "nic", Pool: "node-a/ib", Device: "pci-0000-01-00-0"}}}
	for _, r := range []claimrecord.Record{gone, old} {
		if err := claimrecord.Write(e.claims, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		args   *skel.CmdArgs
		code   uint
		target error
		claims string // the node's claims dir; "" is e's
	}{
		{name: "device unknown on the node", args: e.args("c", pod, "pod-gone", draPrev), code: CodeDeviceNotFound, target: ErrDeviceNotFound},
		{name: "record without an rdma device", args: e.args("c", pod, "pod-old", draPrev), code: CodeDeviceNotFound, target: ErrDeviceNotFound},
		{name: "not chained, no claim", args: e.args("c", pod, "pod-none", ""), code: CodeNotAllocated, target: ErrNotAllocated},
		{name: "no pod uid", args: func() *skel.CmdArgs {
			a := e.args("c", pod, "pod-a", draPrev)
			a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"
			return a
		}(), code: types.ErrInvalidEnvironmentVariables, target: ErrBadEnvironment},
		{name: "no claims dir (no DRA driver)", args: draEnv{env: e.env, claims: filepath.Join(e.claims, "missing")}.args("c", pod, "pod-a", draPrev),
			code: types.ErrPluginNotAvailable, target: ErrNotAvailable, claims: filepath.Join(e.claims, "missing")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.p.Node.DRAClaimsDir = e.claims
			if tc.claims != "" {
				e.p.Node.DRAClaimsDir = tc.claims
			}
			_, err := e.p.Add(context.Background(), tc.args)
			if !errors.Is(err, tc.target) || cniCode(err) != tc.code {
				t.Fatalf("ADD = %v (code %d), want %v (code %d)", err, cniCode(err), tc.target, tc.code)
			}
			t.Logf("ADD error: %v", err)
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("changed (-before +after):\n%s", diff)
			}
		})
	}

	t.Run("chained, no claim: prevResult passes through", func(t *testing.T) {
		a := e.args("c", pod, "pod-none", draPrev)
		res := mustAdd(t, e.env, a)
		if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || len(res.IPs) != 1 {
			t.Errorf("result = %+v, want prevResult", res)
		}
		if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
			t.Errorf("changed (-before +after):\n%s", diff)
		}
		if err := e.p.Del(context.Background(), a); err != nil {
			t.Errorf("DEL: %v", err)
		}
	})

	t.Run("status", func(t *testing.T) {
		if err := e.p.Status(context.Background(), e.args("", nil, "", "")); err != nil {
			t.Errorf("STATUS with a claims dir: %v", err)
		}
		missing := draEnv{env: e.env, claims: filepath.Join(e.claims, "missing")}
		if err := e.p.Status(context.Background(), missing.args("", nil, "", "")); cniCode(err) != types.ErrPluginNotAvailable {
			t.Errorf("STATUS without a claims dir = %v, want code %d", err, types.ErrPluginNotAvailable)
		}
	})
}

// TestDRARollback: a failure midway (the second netdev's move, or the
// second RDMA device's move in exclusive mode) puts back what the first
// device's steps did; the host, the RDMA devices and the state dir are as
// before and the pod is empty.
func TestDRARollback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  rdma.NetnsMode
		setup func(e draEnv)
	}{
		{name: "second netdev move", mode: "shared", setup: func(e draEnv) {
			e.p.Links = &failLinks{Links: e.p.Links, host: e.host.Handle, nth: 2}
		}},
		{name: "second rdma device move", mode: "exclusive", setup: func(e draEnv) {
			moves := 0
			e.rdma.fail = func(m string, ns netns.NsHandle) error {
				if m == "Move" && !ns.Equal(e.host.Handle) {
					if moves++; moves == 2 {
						return errInjected
					}
				}
				return nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDRAEnv(t, 2, tc.mode)
			pod := netnstest.New(t)
			e.prepare("claim-1", []string{"pod-a"}, 0, 1)
			tc.setup(e)
			before := e.snapshot(pod)
			_, err := e.p.Add(context.Background(), e.args("c1", pod, "pod-a", draPrev))
			if !errors.Is(err, errInjected) {
				t.Fatalf("ADD = %v, want the injected failure", err)
			}
			t.Logf("ADD error: %v", err)
			requireRolledBack(t, e.env, pod, before)
		})
	}
}

// TestDRATornRecord: one claim record that does not decode costs only its
// own claim. main failed every ADD on the node in DRA chained mode (code
// 999), pods with no claim included.
func TestDRATornRecord(t *testing.T) {
	e := newDRAEnv(t, 2, "shared")
	e.prepare("claim-a", []string{"pod-a"}, 0)
	if err := os.WriteFile(claimrecord.Path(e.claims, "claim-torn"), []byte(`{"version":2,"uid":"cla`), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := netnstest.New(t)
	none := e.args("c0", pod, "pod-none", draPrev)
	res := mustAdd(t, e.env, none)
	if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" {
		t.Errorf("pod without a claim: result = %+v, want prevResult", res)
	}
	if err := e.p.Del(context.Background(), none); err != nil {
		t.Errorf("DEL: %v", err)
	}
	if moved, _ := filepath.Glob(filepath.Join(e.claims, claimrecord.QuarantineDir, "claim-torn.json.*")); len(moved) != 1 {
		t.Errorf("torn record not moved aside: quarantine holds %q", moved)
	}
	podA := netnstest.New(t)
	a := e.args("c1", podA, "pod-a", draPrev)
	res = mustAdd(t, e.env, a)
	if len(res.Interfaces) != 2 {
		t.Errorf("pod with a claim beside a torn record: result = %+v, want eth0 and its NIC", res)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Errorf("DEL: %v", err)
	}
}
