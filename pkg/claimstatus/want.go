package claimstatus

import (
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// claimRef names a claim on the API server: a GET or an apply by name
// whose object has another UID is a claim created again, not this one.
type claimRef struct{ Namespace, Name, UID string }

// devKey is a status.devices entry's key for our driver: the device, and
// the allocation's share of it for a device of a shared pool (KEP-4817's
// AllocatedDeviceStatus.shareID; "" for a device allocated whole), so the
// entries of the claims sharing a NIC are each their own pod's.
type devKey struct{ Pool, Device, ShareID string }

// netInfo is what an entry says: the pod's interface, its addresses
// (CIDRs, joined by ","), its MAC, and whether it carries our Ready
// condition. Comparable, so a state compares with ==.
type netInfo struct {
	IfName, IPs, MAC string
	Ready            bool
}

// entries are a claim's status.devices entries of our driver.
type entries map[devKey]netInfo

// chainedPools are the configured pools whose pods get their netdevs from
// the CNI plugin's chained entry through the DRA front end's claims
// (netdevcheck.Why.DRA): with the view's pools and the chained pool.
func chainedPools(v agent.View, chainedPool string) []string {
	chain := netdevcheck.Chain{Pool: chainedPool}
	netdev := netdevcheck.WithDRA(netdevcheck.Pools(v.Pools, chain), v.Pools, chain, true)
	var out []string
	for pool, why := range netdev {
		if why.DRA() {
			out = append(out, pool)
		}
	}
	slices.Sort(out)
	return out
}

// want is every claim's status as the records say: for each device of a
// chained pool that a claim record holds, the entry of the complete
// attachment record that attached its netdev into a pod the claim is
// reserved for. names maps a record's device ID to its RDMA name now
// (netdevcheck.Names), the name the CNI plugin wrote; the name at Prepare
// when the device is not in it. A claim none of whose devices is attached
// has an empty entries, and a claim with no device of a chained pool none.
func want(pools []string, claims []claimrecord.Record, recs []attachment.Attachment, names map[string]string) map[claimRef]entries {
	out := map[claimRef]entries{}
	for _, c := range claims {
		ref := claimRef{c.Namespace, c.Name, c.UID}
		for _, d := range c.Devices {
			if d.AdminAccess || !slices.ContainsFunc(pools, d.OfPool) {
				continue
			}
			if out[ref] == nil {
				out[ref] = entries{}
			}
			name := d.RDMA
			if n, ok := names[d.ID()]; ok {
				name = n
			}
			if info, ok := attached(c, name, recs); ok {
				out[ref][devKey{d.Pool, d.Device, d.ShareID}] = info
			}
		}
	}
	return out
}

// attached finds the pod interface of RDMA device name in a complete
// attachment record of a pod claim c is reserved for.
func attached(c claimrecord.Record, name string, recs []attachment.Attachment) (netInfo, bool) {
	if name == "" {
		return netInfo{}, false
	}
	for _, a := range recs {
		if !a.Complete || a.Pod == nil || !c.ForPod(a.Pod.UID) {
			continue
		}
		for _, d := range a.Devices {
			if d.RDMA == name && !d.Returned && d.PodIfName != "" {
				return netInfo{IfName: d.PodIfName, IPs: strings.Join(d.IPs, ","), MAC: d.PodMAC, Ready: true}, true
			}
		}
	}
	return netInfo{}, false
}

// observed is what the API server's claim holds of our driver's entries,
// and when each entry's Ready condition last changed (kept when the entry
// is written again).
func observed(c *resourceapi.ResourceClaim) (entries, map[devKey]time.Time) {
	out, since := entries{}, map[devKey]time.Time{}
	for _, d := range c.Status.Devices {
		if d.Driver != claimrecord.DriverName {
			continue
		}
		k := devKey{Pool: d.Pool, Device: d.Device}
		if d.ShareID != nil {
			k.ShareID = *d.ShareID
		}
		var info netInfo
		if n := d.NetworkData; n != nil {
			info = netInfo{IfName: n.InterfaceName, IPs: strings.Join(n.IPs, ","), MAC: n.HardwareAddress}
		}
		for _, cond := range d.Conditions {
			if cond.Type == ConditionReady && cond.Status == "True" && cond.Reason == ReasonAttached {
				info.Ready = true
				since[k] = cond.LastTransitionTime.Time
			}
		}
		out[k] = info
	}
	return out, since
}
