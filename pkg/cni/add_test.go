package cni

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestAddCheckDel runs ADD, CHECK and DEL of a hardware device for each spec
// version, with host-local IPAM, asserting from inside the pod netns.
func TestAddCheckDel(t *testing.T) {
	requireHostLocal(t)
	for _, ver := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(ver, func(t *testing.T) {
			e := newEnv(t, 1, false, "shared")
			pod := netnstest.New(t)
			before := e.snapshot(pod)
			conf := e.conf(ver, `"mtu":9000,"mac":"02:00:00:00:00:0a","runtimeConfig":{"deviceID":"`+pciAddr(0)+`"},`+e.ipam("10.10.0.0/24"))
			res := mustAdd(t, e, args("c1", pod, "net1", conf))

			want := []netnstest.Link{{Name: "net1", MTU: 9000, Up: true, MAC: "02:00:00:00:00:0a"}}
			if diff := cmp.Diff(want, netnstest.Links(t, pod)); diff != "" {
				t.Errorf("pod links (-want +got):\n%s", diff)
			}
			for _, l := range netnstest.Links(t, e.host) {
				if l.Name == "nic0" {
					t.Errorf("nic0 still on the host")
				}
			}
			addrs, err := rdma.Addresses{}.List(pod.Handle, "net1")
			if err != nil || len(addrs) != 1 || addrs[0].String() != "10.10.0.2/24" {
				t.Errorf("pod addresses = %v, %v; want 10.10.0.2/24", addrs, err)
			}
			if len(res.Interfaces) != 1 || res.Interfaces[0].Sandbox != pod.Path || res.Interfaces[0].Name != "net1" ||
				res.Interfaces[0].PciID != pciAddr(0) || len(res.IPs) != 1 || *res.IPs[0].Interface != 0 {
				t.Errorf("result = %+v", res)
			}
			// The record has the addresses too, for the claim's status (pkg/claimstatus).
			rec, err := attachment.Store{Dir: e.stateDir}.Load(attachment.Key{ContainerID: "c1", IfName: "net1"})
			if err != nil || len(rec.Devices) != 1 {
				t.Fatalf("record = %+v, %v", rec, err)
			}
			if diff := cmp.Diff([]string{"10.10.0.2/24"}, rec.Devices[0].IPs); diff != "" {
				t.Errorf("record's ips (-want +got):\n%s", diff)
			}
			// The result in the configured version, as the runtime gets it.
			vres, err := res.GetAsVersion(ver)
			if err != nil {
				t.Fatal(err)
			}
			if vres.Version() != ver {
				t.Errorf("result version %s, want %s", vres.Version(), ver)
			}

			// CHECK (spec 0.4.0 on) gets the result back as prevResult.
			raw, _ := json.Marshal(vres)
			check := e.conf(ver, `"mtu":9000,"runtimeConfig":{"deviceID":"`+pciAddr(0)+`"},`+e.ipam("10.10.0.0/24")+`,"prevResult":`+string(raw))
			if err := e.p.Check(context.Background(), args("c1", pod, "net1", check)); ver != "0.3.1" && err != nil {
				t.Errorf("CHECK: %v", err)
			}

			if err := e.p.Del(context.Background(), args("c1", pod, "net1", conf)); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("host after DEL (-before +after):\n%s", diff)
			}
			if got := netnstest.Links(t, pod); len(got) != 0 {
				t.Errorf("pod still has %v", got)
			}
		})
	}
}

// TestCheckDetectsDrift changes the pod interface behind the plugin's back.
func TestCheckDetectsDrift(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	for _, tc := range []struct {
		name  string
		drift func(t *testing.T, pod *netnstest.NS)
	}{
		{"mtu", func(t *testing.T, pod *netnstest.NS) {
			h := netnstest.Handle(t, pod)
			l, _ := h.LinkByName("net1")
			if err := h.LinkSetMTU(l, 1280); err != nil {
				t.Fatal(err)
			}
		}},
		{"renamed", func(t *testing.T, pod *netnstest.NS) {
			h := netnstest.Handle(t, pod)
			l, _ := h.LinkByName("net1")
			if err := h.LinkSetDown(l); err != nil {
				t.Fatal(err)
			}
			if err := h.LinkSetName(l, "other"); err != nil {
				t.Fatal(err)
			}
		}},
		{"mac", func(t *testing.T, pod *netnstest.NS) {
			h := netnstest.Handle(t, pod)
			l, _ := h.LinkByName("net1")
			mac, _ := net.ParseMAC("02:00:00:00:00:99")
			if err := h.LinkSetHardwareAddr(l, mac); err != nil {
				t.Fatal(err)
			}
		}},
		{"down", func(t *testing.T, pod *netnstest.NS) {
			h := netnstest.Handle(t, pod)
			l, _ := h.LinkByName("net1")
			if err := h.LinkSetDown(l); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := netnstest.New(t)
			conf := e.conf("1.1.0", `"mtu":4000,"runtimeConfig":{"deviceID":"mlx5_0"}`)
			a := args("c-"+tc.name, pod, "net1", conf)
			mustAdd(t, e, a)
			if err := e.p.Check(context.Background(), a); err != nil {
				t.Fatalf("CHECK before drift: %v", err)
			}
			tc.drift(t, pod)
			if err := e.p.Check(context.Background(), a); err == nil {
				t.Errorf("CHECK after drift succeeded")
			}
			// DEL still returns the device, even renamed in the pod.
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			found := false
			for _, l := range netnstest.Links(t, e.host) {
				found = found || l.Name == "nic0"
			}
			if !found && tc.name != "renamed" {
				t.Errorf("nic0 not back on the host")
			}
			if tc.name == "renamed" {
				// Renamed in the pod, the netdev is not found under its pod name;
				// it stays in the pod until the netns dies. Return it for the
				// next case as the kernel would.
				h := netnstest.Handle(t, pod)
				l, _ := h.LinkByName("other")
				if err := h.LinkSetNsFd(l, int(e.host.Handle)); err != nil {
					t.Fatal(err)
				}
				hh := netnstest.Handle(t, e.host)
				l, _ = hh.LinkByName("other")
				if err := hh.LinkSetName(l, "nic0"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestAddRefusals: each bad request is a clear error and changes nothing.
func TestAddRefusals(t *testing.T) {
	e := newEnv(t, 2, false, "shared")
	pod := netnstest.New(t)
	other := netnstest.New(t)
	// nic1 is already in another netns: its RDMA device's netdev is gone
	// from the host.
	h := netnstest.Handle(t, e.host)
	l, _ := h.LinkByName("nic1")
	if err := h.LinkSetNsFd(l, int(other.Handle)); err != nil {
		t.Fatal(err)
	}
	// mlx5_0 is claimed by another attachment.
	busyPod := netnstest.New(t)
	mustAdd(t, e, args("busy", busyPod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`)))
	t.Cleanup(func() { _ = e.p.Del(context.Background(), args("busy", busyPod, "net1", e.conf("1.1.0", ""))) })
	netnstest.Veth(t, pod, "taken", "takenp")
	before := e.snapshot(pod)
	for _, tc := range []struct {
		name   string
		stdin  string
		ifName string
		code   uint
	}{
		{"malformed json", `{"cniVersion":`, "net1", types.ErrDecodingFailure},
		{"unknown field", string(e.conf("1.1.0", `"master":"eth0","runtimeConfig":{"deviceID":"mlx5_0"}`)), "net1", types.ErrInvalidNetworkConfig},
		{"missing deviceID", string(e.conf("1.1.0", "")), "net1", types.ErrInvalidNetworkConfig},
		{"no such device", string(e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_9"}`)), "net1", CodeDeviceNotFound},
		{"device in another netns", string(e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)), "net1", CodeDeviceInUse},
		{"device claimed", string(e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+pciAddr(0)+`"}`)), "net1", CodeDeviceInUse},
		{"bad ifname", string(e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)), "a/b", types.ErrInvalidEnvironmentVariables},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.p.Add(context.Background(), args("c", pod, tc.ifName, []byte(tc.stdin)))
			if got := cniCode(err); got != tc.code {
				t.Errorf("ADD error code %d (%v), want %d", got, err, tc.code)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("host changed (-before +after):\n%s", diff)
			}
		})
	}
	// The pod name is taken: a free device, and nothing moves.
	ol := netnstest.Handle(t, other)
	l, _ = ol.LinkByName("nic1")
	if err := ol.LinkSetNsFd(l, int(e.host.Handle)); err != nil {
		t.Fatal(err)
	}
	before = e.snapshot(pod)
	_, err := e.p.Add(context.Background(), args("c", pod, "taken", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)))
	if got := cniCode(err); got != CodeNameTaken {
		t.Errorf("ADD with a taken pod name: code %d (%v), want %d", got, err, CodeNameTaken)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("host changed (-before +after):\n%s", diff)
	}
}

// TestResultMTU: the result reports the pod interface's actual MTU (here
// the NIC's own, none being configured) in versions whose interfaces have
// the field (1.1.0), and leaves it out of older ones.
func TestResultMTU(t *testing.T) {
	for _, tc := range []struct {
		ver   string
		extra string
		want  int
	}{
		{"0.4.0", "", 0}, {"1.0.0", "", 0}, {"1.0.0", `"mtu":9000,`, 0},
		{"1.1.0", "", 1400}, {"1.1.0", `"mtu":9000,`, 9000},
	} {
		t.Run(tc.ver+" "+tc.extra, func(t *testing.T) {
			e := newEnv(t, 1, false, "shared")
			h := netnstest.Handle(t, e.host)
			l, _ := h.LinkByName("nic0")
			if err := h.LinkSetMTU(l, 1400); err != nil {
				t.Fatal(err)
			}
			pod := netnstest.New(t)
			a := args("c1", pod, "net1", e.conf(tc.ver, tc.extra+`"runtimeConfig":{"deviceID":"mlx5_0"}`))
			res := mustAdd(t, e, a)
			defer func() { _ = e.p.Del(context.Background(), a) }()
			vres, err := res.GetAsVersion(tc.ver)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(vres)
			var got struct {
				Interfaces []struct {
					MTU int `json:"mtu"`
				} `json:"interfaces"`
			}
			if err := json.Unmarshal(raw, &got); err != nil || len(got.Interfaces) != 1 || got.Interfaces[0].MTU != tc.want {
				t.Errorf("result %s: want one interface with mtu %d", raw, tc.want)
			}
		})
	}
}

// TestChecksBeforeRDMAMode: with rdmaNetnsMode auto on a node without RDMA
// netlink (the fake answers NetnsMode as such a kernel does), the checks
// that need no kernel come first and give their own codes.
func TestChecksBeforeRDMAMode(t *testing.T) {
	e := newEnv(t, 2, false, "auto")
	pod, busyPod := netnstest.New(t), netnstest.New(t)
	mustAdd(t, e, args("busy", busyPod, "net1", e.conf("1.1.0", `"rdmaNetnsMode":"shared","runtimeConfig":{"deviceID":"mlx5_1"}`)))
	t.Cleanup(func() { _ = e.p.Del(context.Background(), args("busy", busyPod, "net1", e.conf("1.1.0", ""))) })
	e.rdma.fail = func(m string, _ netns.NsHandle) error {
		if m == "NetnsMode" {
			return fmt.Errorf("open rdma netlink socket: %w: %w", rdma.ErrNoRDMA, unix.EPROTONOSUPPORT)
		}
		return nil
	}
	netnstest.Veth(t, pod, "taken", "takenp")
	for _, tc := range []struct {
		name, dev, ifName string
		code              uint
	}{
		{"no such device", "mlx5_9", "net1", CodeDeviceNotFound},
		{"device claimed", "mlx5_1", "net1", CodeDeviceInUse},
		{"pod name taken", "mlx5_0", "taken", CodeNameTaken},
		{"then the mode", "mlx5_0", "net1", types.ErrInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.p.Add(context.Background(), args("c", pod, tc.ifName, e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+tc.dev+`"}`)))
			if got := cniCode(err); got != tc.code {
				t.Errorf("ADD: code %d (%v), want %d", got, err, tc.code)
			}
		})
	}
}

// TestSoftDeviceNeedsNoRDMAMode: rdmaNetnsMode auto asks the kernel only
// for hardware devices; a soft-RoCE device attaches where the kernel cannot
// be asked (the fake answers NetnsMode as a kernel without RDMA netlink).
func TestSoftDeviceNeedsNoRDMAMode(t *testing.T) {
	e := newEnv(t, 0, true, "auto")
	e.rdma.fail = func(m string, _ netns.NsHandle) error {
		if m == "NetnsMode" {
			return fmt.Errorf("open rdma netlink socket: %w: %w", rdma.ErrNoRDMA, unix.EPROTONOSUPPORT)
		}
		return nil
	}
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"rxe0"}`))
	mustAdd(t, e, a)
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// TestCheckAddresses: CHECK wants the addresses prevResult gave the pod
// interface to be on it.
func TestCheckAddresses(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	defer func() { _ = e.p.Del(context.Background(), a) }()
	prev := `"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"net1","sandbox":"` + pod.Path + `"}],` +
		`"ips":[{"address":"10.9.0.5/24","interface":0}]}`
	check := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+prev))
	if err := e.p.Check(context.Background(), check); err == nil {
		t.Error("CHECK succeeded without the address on net1")
	}
	_, ipn, _ := net.ParseCIDR("10.9.0.0/24")
	ipn.IP = net.ParseIP("10.9.0.5").To4()
	if err := (rdma.Addresses{}).Configure(pod.Handle, "net1", []net.IPNet{*ipn}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Check(context.Background(), check); err != nil {
		t.Errorf("CHECK with the address: %v", err)
	}
}

// TestCheckRunsIPAMCheck: CHECK ends with the IPAM plugin's CHECK, which
// fails here because the lease was removed behind the plugins' back.
func TestCheckRunsIPAMCheck(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	conf := e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.50.0.0/24"))
	res := mustAdd(t, e, args("c1", pod, "net1", conf))
	defer func() { _ = e.p.Del(context.Background(), args("c1", pod, "net1", conf)) }()
	vres, _ := res.GetAsVersion("1.0.0")
	raw, _ := json.Marshal(vres)
	check := args("c1", pod, "net1", e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.50.0.0/24")+`,"prevResult":`+string(raw)))
	if err := e.p.Check(context.Background(), check); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if err := os.Remove(filepath.Join(e.stateDir, "..", "ipam", "rdma", "10.50.0.2")); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Check(context.Background(), check); err == nil || !strings.Contains(err.Error(), "ipam host-local check") {
		t.Errorf("CHECK with the IPAM lease gone = %v, want the IPAM CHECK's error", err)
	}
}

// TestSiwRefused: only rxe soft devices are re-created in the pod; a siw
// device (which the kernel would destroy when its netdev leaves) is refused
// before any change.
func TestSiwRefused(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	netnstest.Veth(t, e.host, "sinic", "sipeer")
	e.sys = writeSysfs(t, 0, map[string]string{"siw0": "sinic"})
	e.writePools(nodepools.File{Pools: []nodepools.Pool{{Name: "soft", Mode: "shared", Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "siw0"}}}}})
	pod := netnstest.New(t)
	before := e.snapshot(pod)
	_, err := e.p.Add(context.Background(), args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"siw0"}`)))
	if err == nil || cniCode(err) != types.ErrInternal || !strings.Contains(err.Error(), "siw") {
		t.Errorf("ADD of siw0 = %v (code %d), want a refusal naming siw", err, cniCode(err))
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("host changed (-before +after):\n%s", diff)
	}
}
