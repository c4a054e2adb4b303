package netdevcheck

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

func TestPools(t *testing.T) {
	views := []agent.PoolView{{Name: "hca"}, {Name: "roce"}, {Name: "aligned", Binding: config.GPUAligned},
		{Name: "shared", Mode: config.Shared, Slots: 8}}
	for _, tc := range []struct {
		chain Chain
		want  map[string]Why
	}{
		{Chain{}, map[string]Why{"aligned": GPUAligned}},
		{Chain{Pool: "roce"}, map[string]Why{"aligned": GPUAligned, "roce": Chained}},
		{Chain{Pool: "roce", SharedNetdev: true}, map[string]Why{"aligned": GPUAligned, "roce": Chained}},
		{Chain{Pool: "gone"}, map[string]Why{"aligned": GPUAligned}},
		// sharedNetdev none (the default): a shared pool's pods get device nodes only.
		{Chain{Pool: "shared"}, map[string]Why{"aligned": GPUAligned}},
		{Chain{Pool: "shared", SharedNetdev: true}, map[string]Why{"aligned": GPUAligned, "shared": Chained}},
	} {
		if diff := cmp.Diff(tc.want, Pools(views, tc.chain)); diff != "" {
			t.Errorf("Pools(%+v) (-want +got):\n%s", tc.chain, diff)
		}
	}
}

func rec(sandbox, ns, name, uid string, complete bool, devs ...string) attachment.Attachment {
	a := attachment.Attachment{Key: attachment.Key{ContainerID: sandbox, IfName: "net1"}, Complete: complete,
		Pod: &attachment.PodRef{Namespace: ns, Name: name, UID: uid}}
	for _, d := range devs {
		a.Devices = append(a.Devices, attachment.Device{RDMA: d})
	}
	return a
}

func TestCheck(t *testing.T) {
	pools := map[string]Why{"roce": Chained, "aligned": GPUAligned}
	pod := Pod{Namespace: "ns", Name: "p", UID: "u1"}
	nri := Pod{Namespace: "ns", Name: "p", UID: "u1", SandboxID: "sb1"}
	bound := rec("sb1", "ns", "p", "u1", true, "mlx5_4")
	bound.Binding = &attachment.Binding{Pool: "aligned"}
	returned := rec("sb1", "ns", "p", "u1", true, "mlx5_2")
	returned.Devices[0].Returned = true
	for _, tc := range []struct {
		name string
		pod  Pod
		held []Holding
		recs []attachment.Attachment
		want []Missing
	}{
		{name: "chained, no record", pod: pod, held: []Holding{{"roce", []string{"mlx5_3", "mlx5_2"}}},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2", "mlx5_3"}}}},
		{name: "chained, complete", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_2")}},
		{name: "chained, half attached", pod: pod, held: []Holding{{"roce", []string{"mlx5_2", "mlx5_3"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_2")},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_3"}}}},
		{name: "chained, ADD in flight (not complete)", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "u1", false, "mlx5_2")},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
		{name: "chained, device returned by DEL", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{returned},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
		{name: "another pod's record", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb2", "ns", "q", "u2", true, "mlx5_2")},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
		{name: "same name, another UID (recreated pod)", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb0", "ns", "p", "u0", true, "mlx5_2")},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
		{name: "record without UID matched by name", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "", true, "mlx5_2")}},
		{name: "NRI: the sandbox's record", pod: nri, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_2")}},
		{name: "NRI: an old sandbox's record only", pod: nri, held: []Holding{{"roce", []string{"mlx5_2"}}},
			recs: []attachment.Attachment{rec("sb0", "ns", "p", "u1", true, "mlx5_2")},
			want: []Missing{{Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
		{name: "gpuAligned, bound", pod: pod, held: []Holding{{"aligned", []string{"slot-0", "slot-1"}}},
			recs: []attachment.Attachment{bound}},
		{name: "gpuAligned, unbound", pod: pod, held: []Holding{{"aligned", []string{"slot-1", "slot-0"}}},
			recs: []attachment.Attachment{rec("sb1", "ns", "p", "u1", true, "mlx5_2")},
			want: []Missing{{Pool: "aligned", Why: GPUAligned, Devices: []string{"slot-0", "slot-1"}}}},
		{name: "pool without netdevs", pod: pod, held: []Holding{{"hca", []string{"mlx5_0"}}}},
		{name: "two pools missing", pod: pod, held: []Holding{{"roce", []string{"mlx5_2"}}, {"aligned", []string{"slot-0"}}, {"hca", []string{"mlx5_0"}}},
			want: []Missing{{Pool: "aligned", Why: GPUAligned, Devices: []string{"slot-0"}}, {Pool: "roce", Why: Chained, Devices: []string{"mlx5_2"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Check(tc.pod, tc.held, pools, tc.recs)); diff != "" {
				t.Errorf("Check (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMessage(t *testing.T) {
	got := Message(Pod{Namespace: "ns", Name: "p"}, Missing{Pool: "roce", Why: Chained, Devices: []string{"mlx5_3"}})
	for _, want := range []string{"pod ns/p", "mlx5_3", "pool roce (chained CNI)", "conflist", "delete the pod"} {
		if !strings.Contains(got, want) {
			t.Errorf("message %q does not say %q", got, want)
		}
	}
}
