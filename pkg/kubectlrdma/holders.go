package kubectlrdma

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// holders is `nodes -o wide`'s HOLDERS cell: each device that something
// holds, in status.devices order, as DEVICE=HOLDER[+HOLDER...]: a pod the
// kubelet allocated it to through the device plugin (NAMESPACE/POD, from
// status.allocations) and a DRA claim prepared with it (claim:NAMESPACE/NAME,
// from status.claims; adminAccess claims hold nothing), then the device's
// DRA shares as (USED/CAPACITY) when its pool publishes a capacity.
func holders(st *v1alpha1.RDMANodeStateStatus) string {
	by := map[string][]string{}
	add := func(dev, h string) {
		if !slices.Contains(by[dev], h) {
			by[dev] = append(by[dev], h)
		}
	}
	for _, a := range st.Allocations {
		for _, dev := range a.RDMADevices {
			add(dev, a.Namespace+"/"+a.Pod)
		}
	}
	for _, c := range st.Claims {
		for _, d := range c.Devices {
			if !d.AdminAccess && d.RDMADevice != "" {
				add(d.RDMADevice, "claim:"+c.Namespace+"/"+c.Name)
			}
		}
	}
	var cells []string
	for _, d := range st.Devices {
		hs := by[d.Name]
		if len(hs) == 0 {
			continue
		}
		cell := d.Name + "=" + strings.Join(hs, "+")
		if s := d.Shares; s != nil && s.Capacity > 0 {
			cell += fmt.Sprintf(" (%d/%d)", s.Used, s.Capacity)
		}
		cells = append(cells, cell)
	}
	return strings.Join(cells, ", ")
}

// claimNICs are the NICs of the DRA claims in s prepared for pod uid of
// namespace ns (status.claims' pods), and the claims' names, sorted.
func claimNICs(s *v1alpha1.RDMANodeState, ns, uid string) (nics []NIC, claims []string) {
	if uid == "" {
		return nil, nil
	}
	for _, c := range s.Status.Claims {
		if c.Namespace != ns || !slices.ContainsFunc(c.Pods, func(p v1alpha1.ClaimPod) bool { return p.UID == uid }) {
			continue
		}
		claims = append(claims, c.Name)
		for _, d := range c.Devices {
			nic := NIC{Name: d.RDMADevice, Claim: c.Name, NUMANode: -1}
			if dev := device(s, d.RDMADevice); dev != nil {
				nic.PCIAddress, nic.NUMANode = dev.PCIAddress, dev.NUMANode
				if len(dev.Netdevs) > 0 {
					nic.Netdev = dev.Netdevs[0]
				}
			}
			nics = append(nics, nic)
		}
	}
	slices.Sort(claims)
	return nics, slices.Compact(claims)
}
