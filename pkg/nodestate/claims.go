package nodestate

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// MaxClaims is the schema's bound of status.claims; MaxClaimItems that of
// a claim's pods and devices.
const (
	MaxClaims     = 1024
	MaxClaimItems = 256
)

// claims are the prepared DRA claims of the records, sorted by namespace,
// name and UID, at most MaxClaims: each with its pods (named where a
// complete attachment record of the pod's UID names it) and its devices
// (their RDMA names found in devs by the record's device ID, so a rename
// since Prepare shows). shares counts, per RDMA name in devs, the claims
// that hold it (adminAccess devices do not hold one).
func claims(recs []claimrecord.Record, devs []discovery.RDMADevice, atts []attachment.Attachment) (out []v1alpha1.Claim, shares map[string]int) {
	byID := make(map[string]string, len(devs))
	for _, d := range devs {
		byID[deviceID(d)] = d.Name
	}
	names := map[string]string{} // pod UID -> name
	for _, a := range atts {
		if a.Complete && a.Pod != nil && a.Pod.UID != "" {
			names[a.Pod.UID] = a.Pod.Name
		}
	}
	shares = map[string]int{}
	for _, r := range recs {
		c := v1alpha1.Claim{Namespace: r.Namespace, Name: r.Name, UID: r.UID, Devices: []v1alpha1.ClaimDevice{}}
		for _, uid := range slices.Sorted(slices.Values(r.PodUIDs)) {
			if len(c.Pods) == MaxClaimItems {
				break
			}
			if len(c.Pods) > 0 && c.Pods[len(c.Pods)-1].UID == uid {
				continue
			}
			c.Pods = append(c.Pods, v1alpha1.ClaimPod{UID: uid, Name: names[uid]})
		}
		held := map[string]bool{} // a claim holds a device once, however many requests name it
		for _, d := range r.Devices {
			if len(c.Devices) == MaxClaimItems {
				break
			}
			name, found := byID[d.ID()]
			if !found {
				name = d.RDMA
			}
			c.Devices = append(c.Devices, v1alpha1.ClaimDevice{Request: d.Request, Pool: d.Pool, Device: d.Device,
				RDMADevice: name, AdminAccess: d.AdminAccess})
			if found && !d.AdminAccess && !held[name] {
				held[name] = true
				shares[name]++
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b v1alpha1.Claim) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name), strings.Compare(a.UID, b.UID))
	})
	return out[:min(len(out), MaxClaims)], shares
}

// deviceID is claimrecord.Device.ID of a device on the node: an SF's
// auxiliary device, a PF's or VF's PCI address, else its RDMA name.
func deviceID(d discovery.RDMADevice) string {
	return claimrecord.Device{RDMA: d.Name, PCIAddress: d.PCIAddress, AuxDevice: d.AuxDevice}.ID()
}
