package cni

import (
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// TestHostNetdev: a device whose ports have several netdevs goes in as one
// interface, the first port's netdev (docs/cni.md, Limits).
func TestHostNetdev(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  discovery.RDMADevice
		want string
	}{
		{"two ports", discovery.RDMADevice{Ports: []discovery.Port{{Netdev: "p0"}, {Netdev: "p1"}}, Netdevs: []string{"p1", "p0"}}, "p0"},
		{"first port without netdev", discovery.RDMADevice{Ports: []discovery.Port{{}, {Netdev: "p1"}}}, "p1"},
		{"soft device: its parent", discovery.RDMADevice{Parent: "eth0", Ports: []discovery.Port{{Netdev: "eth0"}}}, "eth0"},
		{"no port netdev", discovery.RDMADevice{Netdevs: []string{"n0"}}, "n0"},
		{"none", discovery.RDMADevice{}, ""},
	} {
		if got := hostNetdev(tc.dev); got != tc.want {
			t.Errorf("%s: hostNetdev = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPoolOf(t *testing.T) {
	for in, want := range map[string]string{"": "", "rdma.kube-rdma.io/gpu-nics": "gpu-nics", "hca": "hca", "a/b/c": "c"} {
		if got := poolOf(in); got != want {
			t.Errorf("poolOf(%q) = %q, want %q", in, got, want)
		}
	}
}
