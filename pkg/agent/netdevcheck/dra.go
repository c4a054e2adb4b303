package netdevcheck

import (
	"cmp"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// DRAChained: the chained pool is the DRA front end's; the CNI plugin
// attaches the netdevs of the devices of the pod's prepared claims of
// driver rdma.kube-rdma.io (the chained entry's draClaimsDir), but not of
// a shared device (a claim's share of a NIC of a shared dra pool): the
// entry's sharedNetdev is none, the plugin's default. It fits
// status.podsWithoutNetdevs.why (letters and spaces, 32 at most).
const DRAChained Why = "DRA chained CNI"

// DRAChainedSharedNetdev is DRAChained with the entry's sharedNetdev
// macvlan or ipvlan: a shared device gets a child netdev too.
const DRAChainedSharedNetdev Why = "DRA chained CNI shared netdev"

// DRA reports whether w is one of the DRA chained Whys, checked claim by
// claim from the claim records.
func (w Why) DRA() bool { return w == DRAChained || w == DRAChainedSharedNetdev }

// WithDRA adds to netdev, Pools' answer, the chained pool as DRAChained
// (DRAChainedSharedNetdev with chain.SharedNetdev) when the DRA front end
// runs (draOn) and the chained pool is not one of the view's: the view has
// the device plugin's pools only, so a chained pool missing from it is a
// pool of frontend dra, whose pods' devices are in the claim records, not
// in PodResources. A chained pool of the device plugin not served yet is
// harmless there: no claim names it.
func WithDRA(netdev map[string]Why, pools []agent.PoolView, chain Chain, draOn bool) map[string]Why {
	if !draOn || chain.Pool == "" || slices.ContainsFunc(pools, func(p agent.PoolView) bool { return p.Name == chain.Pool }) {
		return netdev
	}
	if netdev == nil {
		netdev = map[string]Why{}
	}
	netdev[chain.Pool] = DRAChained
	if chain.SharedNetdev {
		netdev[chain.Pool] = DRAChainedSharedNetdev
	}
	return netdev
}

// netdevDevice reports whether the CNI plugin attaches a netdev for d, a
// device of a claim of a pool whose Why is why.
func netdevDevice(why Why, d claimrecord.Device) bool {
	return d.GetsNetdev(why == DRAChainedSharedNetdev)
}

// Names maps what a claim record calls a device (claimrecord.Device.ID:
// an SF's auxiliary device, a PCI address, else an RDMA name) to its RDMA
// name in the view's snapshot, the name the CNI plugin resolves at ADD and
// writes into its attachment record. Probe order and udev renames change
// RDMA names between a Prepare and an ADD, not these IDs.
func Names(v agent.View) map[string]string {
	out := map[string]string{}
	if v.Snapshot == nil || v.Snapshot.Node == nil {
		return out
	}
	for _, d := range v.Snapshot.Node.RDMADevices {
		id := claimrecord.Device{RDMA: d.Name, PCIAddress: d.PCIAddress, AuxDevice: d.AuxDevice}.ID()
		out[id] = d.Name
	}
	return out
}

// ClaimHoldings returns what the pod (by UID) holds through its prepared
// claims of driver rdma.kube-rdma.io in pools of netdev whose Why is
// DRA (shared devices only with DRAChainedSharedNetdev): per pool, the RDMA names of the claims' devices (names,
// Names' answer, gives the current name; the record's name at Prepare
// when the device is not in it). Admin-access results hold no device and
// get no netdev: left out. A claim reserved for the pod after it was
// prepared does not list the pod (claimrecord.Record.PodUIDs) and the CNI
// plugin attaches nothing of it: not a holding either.
func ClaimHoldings(podUID string, recs []claimrecord.Record, netdev map[string]Why, names map[string]string) []Holding {
	var out []Holding
	for pool, why := range netdev {
		if !why.DRA() {
			continue
		}
		var devs []string
		for _, r := range recs {
			if !r.ForPod(podUID) {
				continue
			}
			for _, d := range r.Devices {
				if !netdevDevice(why, d) || !d.OfPool(pool) {
					continue
				}
				name := d.RDMA
				if n, ok := names[d.ID()]; ok {
					name = n
				}
				if name != "" && !slices.Contains(devs, name) {
					devs = append(devs, name)
				}
			}
		}
		if len(devs) > 0 {
			out = append(out, Holding{Pool: pool, Devices: devs})
		}
	}
	slices.SortFunc(out, func(a, b Holding) int { return cmp.Compare(a.Pool, b.Pool) })
	return out
}

// ClaimPods returns the UIDs of the pods the records' claims of DRA
// pools of netdev (with a device that gets a netdev) are reserved for, each with the first such claim (a
// claim and its pods share a namespace; the claim's status.reservedFor
// names the pod).
func ClaimPods(recs []claimrecord.Record, netdev map[string]Why) map[string]claimrecord.Record {
	out := map[string]claimrecord.Record{}
	for _, r := range recs {
		for pool, why := range netdev {
			if !why.DRA() || !slices.ContainsFunc(r.Devices, func(d claimrecord.Device) bool { return netdevDevice(why, d) && d.OfPool(pool) }) {
				continue
			}
			for _, uid := range r.PodUIDs {
				if _, ok := out[uid]; !ok {
					out[uid] = r
				}
			}
		}
	}
	return out
}
