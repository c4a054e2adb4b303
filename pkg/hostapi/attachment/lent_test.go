package attachment

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestLent(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []Attachment
		want map[string]bool
	}{
		{"none", nil, map[string]bool{}},
		{"hardware moved, being written", []Attachment{{Devices: []Device{{RDMA: "mlx5_0", RDMAExclusive: true}}}},
			map[string]bool{"mlx5_0": true}},
		{"hardware moved, complete", []Attachment{{Complete: true, Devices: []Device{{RDMA: "mlx5_0", RDMAExclusive: true}}}},
			map[string]bool{"mlx5_0": true}},
		{"hardware in shared mode stays on the host", []Attachment{{Complete: true, Devices: []Device{{RDMA: "mlx5_0"}}}},
			map[string]bool{}},
		{"soft before its exclusive mark", []Attachment{{Devices: []Device{{RDMA: "rxe0", SoftType: "rxe"}}}},
			map[string]bool{"rxe0": true}},
		{"soft in the pod under another name", []Attachment{{Complete: true, Devices: []Device{{RDMA: "rxe0", SoftType: "rxe", PodRDMA: "rxe1", RDMAExclusive: true}}}},
			map[string]bool{"rxe0": true}},
		{"returned", []Attachment{{Complete: true, Devices: []Device{{RDMA: "mlx5_0", RDMAExclusive: true, Returned: true}}}},
			map[string]bool{}},
		{"child netdev", []Attachment{{Complete: true, Devices: []Device{{RDMA: "mlx5_0", Child: "macvlan"}}}},
			map[string]bool{}},
		{"several", []Attachment{
			{Devices: []Device{{RDMA: "mlx5_0", RDMAExclusive: true}, {RDMA: "mlx5_1", RDMAExclusive: true, Returned: true}}},
			{Devices: []Device{{RDMA: "mlx5_2", RDMAExclusive: true}}},
		}, map[string]bool{"mlx5_0": true, "mlx5_2": true}},
	} {
		if diff := cmp.Diff(c.want, Lent(c.recs)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}
