package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// hostPathsEnv is a host with one NIC (mlx5_0 on nic0), a node file, and a
// pod netns.
type hostPathsEnv struct {
	host, pod *netnstest.NS
	node      netconf.Node
	nodeFile  string
}

func newHostPathsEnv(t *testing.T) hostPathsEnv {
	host, pod := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "peer0")
	port := nodesim.Port{State: nodesim.StateActive, PhysState: nodesim.PhysLinkUp, LinkLayer: "Ethernet"}
	tree, err := nodesim.Build(t.TempDir(), nodesim.Topology{
		PCI: []nodesim.Function{{Path: "pci0000:00/0000:00:01.0/0000:01:00.0", Vendor: "15b3", Device: "1017", Class: "020000",
			Driver: "mlx5_core", NUMANode: -1, Netdevs: []nodesim.Netdev{{Name: "nic0"}}}},
		RDMA: []nodesim.RDMA{{Name: "mlx5_0", Parent: "0000:01:00.0", Ports: []nodesim.Port{port}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := netconf.Node{StateDir: filepath.Join(dir, "state"), LogFile: filepath.Join(dir, "cni.log"), SysfsRoot: tree.SysRoot,
		ProcRoot: tree.ProcRoot, KubeletSocket: filepath.Join(dir, "none.sock"), AllocDir: filepath.Join(dir, "alloc"),
		DRAClaimsDir: filepath.Join(dir, "claims")}
	return hostPathsEnv{host: host, pod: pod, node: n, nodeFile: writeNodeFile(t, n)}
}

// TestNetconfCannotNameHostPaths: against the real binary, a netconf that
// names a host path other than the node file's, or turns
// requirePodResources off, is refused with code 7 and a message naming the
// field and the node's value; nothing changes on the host (the NIC stays,
// the path named is not created). One case per field.
func TestNetconfCannotNameHostPaths(t *testing.T) {
	e := newHostPathsEnv(t)
	const base = `"cniVersion":"1.0.0","name":"tenant","type":"kube-rdma","rdmaNetnsMode":"shared","runtimeConfig":{"deviceID":"mlx5_0"}`
	for _, tc := range []struct {
		field, node string
		value       any
	}{
		{"stateDir", e.node.StateDir, "ELSEWHERE/state"},
		{"logFile", e.node.LogFile, "ELSEWHERE/evil.log"},
		{"kubeletSocket", e.node.KubeletSocket, "ELSEWHERE/missing.sock"},
		{"sysfsRoot", e.node.SysfsRoot, "ELSEWHERE/sys"},
		{"procRoot", e.node.ProcRoot, "ELSEWHERE/proc"},
		{"allocDir", e.node.AllocDir, "ELSEWHERE/alloc"},
		{"draClaimsDir", e.node.DRAClaimsDir, "ELSEWHERE/claims"},
		{"requirePodResources", "", false},
	} {
		t.Run(tc.field, func(t *testing.T) {
			elsewhere := t.TempDir()
			v := tc.value
			if s, ok := v.(string); ok {
				v = strings.Replace(s, "ELSEWHERE", elsewhere, 1)
			}
			b, _ := json.Marshal(v)
			stdin := "{" + base + `,"` + tc.field + `":` + string(b) + "}"
			before := netnstest.Links(t, e.host)
			r := invoke(t, e.host, e.nodeFile, "ADD", e.pod.Path, stdin)
			var got types.Error
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 || got.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("ADD with %s=%s: exit %d, stdout %q, want code %d", tc.field, b, r.exit, r.stdout, types.ErrInvalidNetworkConfig)
			}
			if !strings.Contains(got.Details, tc.field) || !strings.Contains(got.Details, tc.node) {
				t.Errorf("error details %q do not name %s and the node's value %q", got.Details, tc.field, tc.node)
			}
			if diff := cmp.Diff(before, netnstest.Links(t, e.host)); diff != "" {
				t.Errorf("host links changed (-before +after):\n%s", diff)
			}
			if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
				t.Errorf("the plugin wrote into the netconf's path: %v", ents)
			}
			// Nothing attached: the state dir holds the operations spool
			// (package cniops) at most.
			ents, err := os.ReadDir(e.node.StateDir)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			for _, ent := range ents {
				if ent.Name() != cniops.DirName {
					t.Errorf("state dir holds %s, want nothing but %s/ (nothing attached)", ent.Name(), cniops.DirName)
				}
			}
		})
	}
}

// TestNADLogFileInEtcChangesNothing: a NetworkAttachmentDefinition's
// config that sets logFile under /etc, run through ADD, DEL and CHECK by the
// real binary with the default node file (none: the built-in defaults), is
// refused and creates no file there.
func TestNADLogFileInEtcChangesNothing(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	target := "/etc/kube-rdma-nad-test-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ".log"
	t.Cleanup(func() { _ = os.Remove(target) })
	nad := `{"cniVersion":"1.0.0","name":"rdma-net","type":"kube-rdma","logFile":"` + target + `","runtimeConfig":{"deviceID":"mlx5_0"}}`
	for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
		r := invoke(t, host, "", cmd, pod.Path, nad)
		var got types.Error
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 || got.Code != types.ErrInvalidNetworkConfig {
			t.Errorf("%s: exit %d, stdout %q, want code %d", cmd, r.exit, r.stdout, types.ErrInvalidNetworkConfig)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Fatalf("%s created %s (stat: %v)", cmd, target, err)
		}
	}
}

// upNIC is a hostPathsEnv whose node file leaves the pod's allocation
// unchecked, and its host's nic0 (mlx5_0's netdev), up.
func upNIC(t *testing.T) (hostPathsEnv, netlink.Link) {
	t.Helper()
	e := newHostPathsEnv(t)
	off := false
	e.node.RequirePodResources = &off
	e.nodeFile = writeNodeFile(t, e.node)
	h := netnstest.Handle(t, e.host)
	l, err := h.LinkByName("nic0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return e, l
}

// TestUplinkRefused: a deviceID whose netdev carries the host's default
// route is refused (code 101), even with the node's paths and the check of
// the pod's allocation off, and the netdev stays on the host.
func TestUplinkRefused(t *testing.T) {
	e, l := upNIC(t)
	h := netnstest.Handle(t, e.host)
	if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 2), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: net.IPv4(10, 77, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	before := netnstest.Links(t, e.host)
	r := invoke(t, e.host, e.nodeFile, "ADD", e.pod.Path,
		`{"cniVersion":"1.0.0","name":"tenant","type":"kube-rdma","rdmaNetnsMode":"shared","runtimeConfig":{"deviceID":"mlx5_0"}}`)
	var got types.Error
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 || got.Code != 101 || !strings.Contains(got.Details, "default route") {
		t.Errorf("ADD of the uplink: exit %d, stdout %q, want code 101 naming the default route", r.exit, r.stdout)
	}
	if diff := cmp.Diff(before, netnstest.Links(t, e.host)); diff != "" {
		t.Errorf("host links changed (-before +after):\n%s", diff)
	}
}

// TestConfiguredNetdevRefused: against the real binary, a deviceID whose
// netdev has an address of the host's, or is a bridge port, is refused (code
// 101, naming what the host uses and the pool option) while no pool of the
// node's pools file allows it, and nothing changes on the host; once the
// device's pool sets allowConfiguredNetdevs the same ADD moves the netdev,
// and its DEL brings it back without the address (the kernel dropped it).
func TestConfiguredNetdevRefused(t *testing.T) {
	const stdin = `{"cniVersion":"1.0.0","name":"tenant","type":"kube-rdma","rdmaNetnsMode":"shared","runtimeConfig":{"deviceID":"mlx5_0"}}`
	refused := func(t *testing.T, e hostPathsEnv, want ...string) {
		t.Helper()
		before := netnstest.Links(t, e.host)
		r := invoke(t, e.host, e.nodeFile, "ADD", e.pod.Path, stdin)
		var got types.Error
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 || got.Code != 101 {
			t.Fatalf("ADD: exit %d, stdout %q, want code 101", r.exit, r.stdout)
		}
		for _, w := range want {
			if !strings.Contains(got.Details, w) {
				t.Errorf("error details %q do not say %q", got.Details, w)
			}
		}
		if diff := cmp.Diff(before, netnstest.Links(t, e.host)); diff != "" {
			t.Errorf("host links changed (-before +after):\n%s", diff)
		}
	}
	pools := func(t *testing.T, e hostPathsEnv, allow bool) {
		t.Helper()
		f := nodepools.File{Pools: []nodepools.Pool{{Name: "roce", Mode: nodepools.ModeExclusive, Frontend: "devicePlugin",
			AllowConfiguredNetdevs: allow, Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: "0000:01:00.0"}}}}}
		b, err := f.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := nodepools.Write(nodepools.Path(e.node.AllocDir), b); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("address", func(t *testing.T) {
		e, l := upNIC(t)
		h := netnstest.Handle(t, e.host)
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 2), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		refused(t, e, "in use by the host", "address 10.77.0.2/24", "in no pool")
		pools(t, e, false)
		refused(t, e, "address 10.77.0.2/24", "its pool roce does not set allowConfiguredNetdevs")
		pools(t, e, true)
		r := invoke(t, e.host, e.nodeFile, "ADD", e.pod.Path, stdin)
		if r.exit != 0 {
			t.Fatalf("ADD with allowConfiguredNetdevs: exit %d, stdout %q", r.exit, r.stdout)
		}
		if _, err := netnstest.Handle(t, e.pod).LinkByName("net1"); err != nil {
			t.Errorf("the netdev is not in the pod as net1: %v", err)
		}
		if r := invoke(t, e.host, e.nodeFile, "DEL", e.pod.Path, stdin); r.exit != 0 {
			t.Fatalf("DEL: exit %d, stdout %q", r.exit, r.stdout)
		}
		back, err := h.LinkByName("nic0")
		if err != nil {
			t.Fatalf("nic0 not back on the host after DEL: %v", err)
		}
		addrs, err := h.AddrList(back, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 0 {
			t.Errorf("nic0's IPv4 addresses after DEL: %v, %v; want none (a moved netdev loses them)", addrs, err)
		}
	})
	t.Run("bridge port", func(t *testing.T) {
		e, l := upNIC(t)
		h := netnstest.Handle(t, e.host)
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
		if err := h.LinkAdd(br); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetMaster(l, br); err != nil {
			t.Fatal(err)
		}
		pools(t, e, false)
		refused(t, e, "port of bridge br0", "allowConfiguredNetdevs")
	})
}
