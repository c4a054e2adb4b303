package claimstatus

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// TestWant: which devices of which claims get an entry, from the records.
func TestWant(t *testing.T) {
	roce, other := claimrecord.DRAPool("node-a", "roce"), claimrecord.DRAPool("node-a", "ib")
	const pod, otherPod = "uid-pod", "uid-other"
	claim := claimrecord.Record{UID: "c1", Namespace: "ns", Name: "nics", PodUIDs: []string{pod}, Devices: []claimrecord.Device{
		{Pool: roce, Device: "pci-0000-3b-00-0", RDMA: "mlx5_0", PCIAddress: "0000:3b:00.0"},
		{Pool: roce, Device: "pci-0000-3b-00-1", RDMA: "mlx5_1", PCIAddress: "0000:3b:00.1"},
		{Pool: roce, Device: "pci-0000-3b-00-2", RDMA: "mlx5_2", PCIAddress: "0000:3b:00.2", AdminAccess: true},
		{Pool: other, Device: "pci-0000-5e-00-0", RDMA: "mlx5_4", PCIAddress: "0000:5e:00.0"},
	}}
	rec := func(uid string, complete bool, devs ...attachment.Device) attachment.Attachment {
		return attachment.Attachment{Key: attachment.Key{ContainerID: "c", IfName: "eth0"}, Pod: &attachment.PodRef{UID: uid}, Complete: complete, Devices: devs}
	}
	net1 := attachment.Device{RDMA: "mlx5_0", PodIfName: "net1", PodMAC: "02:00:00:00:00:01", IPs: []string{"10.0.0.2/24"}}
	ref := claimRef{"ns", "nics", "c1"}
	for _, tc := range []struct {
		name  string
		pools []string
		recs  []attachment.Attachment
		names map[string]string
		want  map[claimRef]entries
	}{
		{name: "attached", pools: []string{"roce"}, recs: []attachment.Attachment{rec(pod, true, net1)},
			want: map[claimRef]entries{ref: {{Pool: roce, Device: "pci-0000-3b-00-0"}: {IfName: "net1", IPs: "10.0.0.2/24", MAC: "02:00:00:00:00:01", Ready: true}}}},
		{name: "no chained dra pool", recs: []attachment.Attachment{rec(pod, true, net1)}, want: map[claimRef]entries{}},
		{name: "add in flight", pools: []string{"roce"}, recs: []attachment.Attachment{rec(pod, false, net1)}, want: map[claimRef]entries{ref: {}}},
		{name: "another pod's", pools: []string{"roce"}, recs: []attachment.Attachment{rec(otherPod, true, net1)}, want: map[claimRef]entries{ref: {}}},
		{name: "given back", pools: []string{"roce"}, recs: []attachment.Attachment{rec(pod, true, attachment.Device{RDMA: "mlx5_0", PodIfName: "net1", Returned: true})},
			want: map[claimRef]entries{ref: {}}},
		{name: "admin access and other pools: none", pools: []string{"roce"}, recs: []attachment.Attachment{rec(pod, true,
			attachment.Device{RDMA: "mlx5_2", PodIfName: "net3"}, attachment.Device{RDMA: "mlx5_4", PodIfName: "net4"})},
			want: map[claimRef]entries{ref: {}}},
		{name: "renamed since Prepare", pools: []string{"roce"}, names: map[string]string{"0000:3b:00.1": "mlx5_7"},
			recs: []attachment.Attachment{rec(pod, true, attachment.Device{RDMA: "mlx5_7", PodIfName: "net2"}, attachment.Device{RDMA: "mlx5_1", PodIfName: "wrong"})},
			want: map[claimRef]entries{ref: {{Pool: roce, Device: "pci-0000-3b-00-1"}: {IfName: "net2", Ready: true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := want(tc.pools, []claimrecord.Record{claim}, tc.recs, tc.names)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("want (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWantShared: two claims that share a NIC of a shared dra pool each
// get the entry of their own pod's child, keyed by their shareID.
func TestWantShared(t *testing.T) {
	pool := claimrecord.DRAPool("node-a", "roce")
	dev := func(share string) []claimrecord.Device {
		return []claimrecord.Device{{Pool: pool, Device: "pci-0000-3b-00-0", RDMA: "mlx5_0", PCIAddress: "0000:3b:00.0", ShareID: share}}
	}
	claims := []claimrecord.Record{
		{UID: "c1", Namespace: "ns", Name: "a", PodUIDs: []string{"pod-a"}, Devices: dev("share-a")},
		{UID: "c2", Namespace: "ns", Name: "b", PodUIDs: []string{"pod-b"}, Devices: dev("share-b")},
	}
	rec := func(pod, ifName, mac string) attachment.Attachment {
		return attachment.Attachment{Key: attachment.Key{ContainerID: pod, IfName: "eth0"}, Pod: &attachment.PodRef{UID: pod}, Complete: true,
			Devices: []attachment.Device{{RDMA: "mlx5_0", Child: "macvlan", PodIfName: ifName, PodMAC: mac}}}
	}
	got := want([]string{"roce"}, claims, []attachment.Attachment{rec("pod-a", "net1", "02:00:00:00:00:0a"), rec("pod-b", "net1", "02:00:00:00:00:0b")}, nil)
	wantEntries := map[claimRef]entries{
		{"ns", "a", "c1"}: {{Pool: pool, Device: "pci-0000-3b-00-0", ShareID: "share-a"}: {IfName: "net1", MAC: "02:00:00:00:00:0a", Ready: true}},
		{"ns", "b", "c2"}: {{Pool: pool, Device: "pci-0000-3b-00-0", ShareID: "share-b"}: {IfName: "net1", MAC: "02:00:00:00:00:0b", Ready: true}},
	}
	if diff := cmp.Diff(wantEntries, got); diff != "" {
		t.Errorf("want (-want +got):\n%s", diff)
	}
	// The entry as applied names the share.
	ac := applyConfig(claimRef{"ns", "a", "c1"}, got[claimRef{"ns", "a", "c1"}], nil)
	if s := ac.Status.Devices[0].ShareID; s == nil || *s != "share-a" {
		t.Errorf("applied entry's shareID %v, want share-a", s)
	}
}
