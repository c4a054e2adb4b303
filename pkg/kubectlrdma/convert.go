package kubectlrdma

import (
	"fmt"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// toDiscovery converts a node state to the discovery report pkg/report
// renders, so `topo NODE`, `topo -f FILE` and `device-plugin discover` print
// one table through one renderer. The state lacks what the daemon does not
// publish (character devices, GIDs, PCI paths, vendor IDs): those render as
// "-". Unhealthy devices and the pools file's errors become warnings.
func toDiscovery(s *v1alpha1.RDMANodeState) *discovery.Node {
	st := &s.Status
	n := &discovery.Node{
		RDMADevices: make([]discovery.RDMADevice, 0, len(st.Devices)),
		GPUs:        make([]discovery.GPU, 0, len(st.GPUs)),
	}
	for _, d := range st.Devices {
		rd := discovery.RDMADevice{Name: d.Name, Kind: discovery.DeviceKind(d.Kind), PCIAddress: d.PCIAddress,
			NUMANode: d.NUMANode, PCIeRoot: d.PCIeRoot, LinkLayer: d.LinkLayer, Netdevs: d.Netdevs}
		for _, p := range d.Ports {
			rd.Ports = append(rd.Ports, discovery.Port{Port: p.Port, State: p.State, PhysState: p.PhysState,
				LinkLayer: p.LinkLayer, Rate: p.Rate, Netdev: p.Netdev})
		}
		n.RDMADevices = append(n.RDMADevices, rd)
		if !d.Healthy {
			n.Warnings = append(n.Warnings, fmt.Sprintf("%s is unhealthy (%s): the kubelet does not allocate it", d.Name, portStates(d.Ports)))
		}
	}
	for _, g := range st.GPUs {
		n.GPUs = append(n.GPUs, discovery.GPU{PCIAddress: g.PCIAddress, UUID: g.UUID, Minor: g.Minor,
			NUMANode: g.NUMANode, PCIeRoot: g.PCIeRoot})
	}
	for _, r := range st.Affinity {
		for i, l := range r.Levels {
			if i < len(st.Devices) {
				n.Affinity = append(n.Affinity, discovery.Affinity{GPU: r.GPU, RDMADevice: st.Devices[i].Name, Level: discovery.Level(l)})
			}
		}
	}
	for _, e := range st.ConfigErrors {
		n.Warnings = append(n.Warnings, "pools file: "+e)
	}
	return n
}
