package attachment

import (
	"fmt"
	"strings"
)

// Coverage is what a pod's complete attachment records give it: the RDMA
// devices attached and not returned, by name (Devices) and by function
// (Functions: FunctionID, for records that carry it), and the pools whose
// binding a record carries (a gpuAligned pool's NICs, chosen by the
// plugin).
type Coverage struct {
	Devices, Functions, Bindings map[string]bool
}

// FunctionID names a device's function the way a rename does not change:
// an SF's auxiliary device, else its PCI address; "" when neither is known
// (a record of a release before they were written).
func FunctionID(pciAddress, auxDevice string) string {
	if auxDevice != "" {
		return auxDevice
	}
	return pciAddress
}

// Covered returns the coverage of the complete records of recs that of
// selects (a pod's records, by sandbox or by pod). It is the one rule of
// "this pod got its netdevs", which every check of it applies: the daemon's
// NRI plugin and detector (pkg/agent/netdevcheck) and the runtime's hook
// (pkg/memlockhook).
func Covered(recs []Attachment, of func(Attachment) bool) Coverage {
	c := Coverage{Devices: map[string]bool{}, Functions: map[string]bool{}, Bindings: map[string]bool{}}
	for _, r := range recs {
		if !r.Complete || !of(r) {
			continue
		}
		if r.Binding != nil {
			c.Bindings[r.Binding.Pool] = true
		}
		for _, d := range r.Devices {
			if !d.Returned {
				c.Devices[d.RDMA] = true
				if id := FunctionID(d.PCIAddress, d.AuxDevice); id != "" {
					c.Functions[id] = true
				}
			}
		}
	}
	return c
}

// NotAttachedFix is what an operator does about a pod that misses its
// netdevs.
const NotAttachedFix = "delete the pod so that it is created again with the CNI entry in place (kubectl delete pod)"

// NotAttachedMessage says, in one line, that the pod (namespace/name)
// holds devices of pool, which gets netdevs as how says ("chained CNI"),
// that no attachment covers, and what to do. Every refuser of such a
// container says it the same way, so that `kubectl describe pod` reads the
// same whichever refused it.
func NotAttachedMessage(pod string, devices []string, pool, how string) string {
	return fmt.Sprintf("kube-rdma: pod %s holds rdma device(s) %s of pool %s (%s) but the kube-rdma CNI plugin attached nothing for it: "+
		"the kube-rdma entry was missing from the CNI conflist when the pod sandbox was created (daemon restart window or uninstall); %s",
		pod, strings.Join(devices, ","), pool, how, NotAttachedFix)
}
