package netdevcheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

func TestWithDRA(t *testing.T) {
	views := []agent.PoolView{{Name: "hca"}}
	for _, tc := range []struct {
		name  string
		chain Chain
		draOn bool
		want  map[string]Why
	}{
		{"dra chained pool", Chain{Pool: "rdma_dra"}, true, map[string]Why{"rdma_dra": DRAChained}},
		{"dra chained pool, shared netdevs", Chain{Pool: "rdma_dra", SharedNetdev: true}, true, map[string]Why{"rdma_dra": DRAChainedSharedNetdev}},
		{"device plugin chained pool", Chain{Pool: "hca"}, true, map[string]Why{"hca": Chained}},
		{"no DRA front end", Chain{Pool: "rdma_dra"}, false, map[string]Why{}},
		{"no chained pool", Chain{}, true, map[string]Why{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithDRA(Pools(views, tc.chain), views, tc.chain, tc.draOn)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("WithDRA (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNames(t *testing.T) {
	v := agent.View{Snapshot: &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{
		{Name: "mlx5_7", PCIAddress: "0000:3b:00.0"}, {Name: "mlx5_9", PCIAddress: "0000:3b:00.0", AuxDevice: "mlx5_core.sf.2"}, {Name: "rxe0"}}}}}
	want := map[string]string{"0000:3b:00.0": "mlx5_7", "mlx5_core.sf.2": "mlx5_9", "rxe0": "rxe0"}
	if diff := cmp.Diff(want, Names(v)); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if got := Names(agent.View{}); len(got) != 0 {
		t.Errorf("Names of a view without a snapshot: %v", got)
	}
}

// claim is a prepared claim of driver rdma.kube-rdma.io on node n1.
func claim(uid string, pods []string, devs ...claimrecord.Device) claimrecord.Record {
	return claimrecord.Record{UID: uid, Namespace: "ns", Name: "c-" + uid, PodUIDs: pods, Devices: devs}
}

func dev(pool, rdma, pci string) claimrecord.Device {
	return claimrecord.Device{Request: "nic", Pool: claimrecord.DRAPool("n1", pool), Device: "d-" + rdma, RDMA: rdma, PCIAddress: pci}
}

// TestDRAClaims is fail closed for a pool of frontend dra with the chained
// CNI: the holdings come from the claim records, the attachments from the
// CNI plugin's records, the decision from Check as for any chained pool.
func TestDRAClaims(t *testing.T) {
	netdev := WithDRA(Pools(nil, Chain{Pool: "rdma_dra"}), nil, Chain{Pool: "rdma_dra"}, true)
	names := map[string]string{"0000:3b:00.0": "mlx5_7"} // renamed since Prepare (mlx5_3)
	admin := dev("rdma_dra", "mlx5_5", "")
	admin.AdminAccess = true
	recs := []claimrecord.Record{
		claim("c1", []string{"u1"}, dev("rdma_dra", "mlx5_3", "0000:3b:00.0"), dev("rdma_dra", "mlx5_4", ""), admin),
		claim("c2", []string{"u2"}, dev("other", "mlx5_0", "")), // a DRA pool whose pods get no netdevs
		claim("c3", []string{"u3"}, dev("rdma_dra", "mlx5_6", "")),
	}
	pod := Pod{Namespace: "ns", Name: "p", UID: "u1"}
	for _, tc := range []struct {
		name     string
		pod      Pod
		attached []attachment.Attachment
		wantHeld []Holding
		want     []Missing
	}{
		{name: "no attachment", pod: pod, wantHeld: []Holding{{"rdma_dra", []string{"mlx5_7", "mlx5_4"}}},
			want: []Missing{{Pool: "rdma_dra", Why: DRAChained, Devices: []string{"mlx5_4", "mlx5_7"}}}},
		{name: "attached", pod: pod, wantHeld: []Holding{{"rdma_dra", []string{"mlx5_7", "mlx5_4"}}},
			attached: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_4", "mlx5_7")}},
		{name: "half attached", pod: pod, wantHeld: []Holding{{"rdma_dra", []string{"mlx5_7", "mlx5_4"}}},
			attached: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_7")},
			want:     []Missing{{Pool: "rdma_dra", Why: DRAChained, Devices: []string{"mlx5_4"}}}},
		{name: "another pod's attachment", pod: pod, wantHeld: []Holding{{"rdma_dra", []string{"mlx5_7", "mlx5_4"}}},
			attached: []attachment.Attachment{rec("sb3", "ns", "q", "u3", true, "mlx5_4", "mlx5_7")},
			want:     []Missing{{Pool: "rdma_dra", Why: DRAChained, Devices: []string{"mlx5_4", "mlx5_7"}}}},
		{name: "claim of a pool without netdevs", pod: Pod{Namespace: "ns", Name: "q", UID: "u2"}},
		{name: "pod without claims", pod: Pod{Namespace: "ns", Name: "r", UID: "u9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := ClaimHoldings(tc.pod.UID, recs, netdev, names)
			if diff := cmp.Diff(tc.wantHeld, held); diff != "" {
				t.Errorf("ClaimHoldings (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, Check(tc.pod, held, netdev, tc.attached)); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(map[string]claimrecord.Record{"u1": recs[0], "u3": recs[2]}, ClaimPods(recs, netdev)); diff != "" {
		t.Errorf("ClaimPods (-want +got):\n%s", diff)
	}
	msg := Message(pod, Missing{Pool: "rdma_dra", Why: DRAChained, Devices: []string{"mlx5_4"}})
	for _, want := range []string{"pod ns/p", "mlx5_4", "pool rdma_dra", "driver rdma.kube-rdma.io", "delete the pod"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
}

// TestDRASharedClaims: a claim's share of a NIC of a shared dra pool gets a
// netdev only with the chained entry's sharedNetdev macvlan or ipvlan;
// with none (the default) its pod holds nothing to check, and a pod that
// also has an exclusive device is checked for that one only.
func TestDRASharedClaims(t *testing.T) {
	share := func(rdma, id string) claimrecord.Device {
		d := dev("rdma_dra", rdma, "")
		d.ShareID = id
		return d
	}
	recs := []claimrecord.Record{
		claim("c1", []string{"u1"}, share("mlx5_3", "s-1")),
		claim("c2", []string{"u2"}, share("mlx5_3", "s-2"), dev("rdma_dra", "mlx5_4", "")),
	}
	for _, tc := range []struct {
		name     string
		chain    Chain
		wantHeld map[string][]Holding
		wantPods []string
	}{
		{"sharedNetdev none", Chain{Pool: "rdma_dra"},
			map[string][]Holding{"u2": {{"rdma_dra", []string{"mlx5_4"}}}}, []string{"u2"}},
		{"sharedNetdev macvlan", Chain{Pool: "rdma_dra", SharedNetdev: true},
			map[string][]Holding{"u1": {{"rdma_dra", []string{"mlx5_3"}}}, "u2": {{"rdma_dra", []string{"mlx5_3", "mlx5_4"}}}}, []string{"u1", "u2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netdev := WithDRA(Pools(nil, tc.chain), nil, tc.chain, true)
			for _, uid := range []string{"u1", "u2"} {
				if diff := cmp.Diff(tc.wantHeld[uid], ClaimHoldings(uid, recs, netdev, nil)); diff != "" {
					t.Errorf("ClaimHoldings(%s) (-want +got):\n%s", uid, diff)
				}
			}
			var pods []string
			for uid := range ClaimPods(recs, netdev) {
				pods = append(pods, uid)
			}
			slices.Sort(pods)
			if diff := cmp.Diff(tc.wantPods, pods); diff != "" {
				t.Errorf("ClaimPods (-want +got):\n%s", diff)
			}
		})
	}
}
