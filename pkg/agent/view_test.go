package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestView: what the node-state publisher reads, and its change channel.
func TestView(t *testing.T) {
	e := start(t, nodesim.HGX(), nil)
	v, changed := e.Agent.View()
	if v.NodeName != "node-a" || v.NetnsMode != rdma.NetnsShared || v.Snapshot == nil || len(v.Pools) != 1 {
		t.Fatalf("view %+v", v)
	}
	p := v.Pools[0]
	if p.Name != "hca" || p.Resource != hca || p.Mode != config.Exclusive || p.Slots != 0 ||
		p.Capacity != 10 || p.Allocatable != 10 || len(p.Members) != 10 || len(p.ByID) != 10 {
		t.Fatalf("pool %+v", p)
	}
	for id, names := range p.ByID {
		if len(names) != 1 || !slices.Contains(p.Members, names[0]) {
			t.Errorf("device ID %s names %q, want one member", id, names)
		}
	}
	if err := e.Tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no view change 5s after a port went down")
	}
	poll(t, 5*time.Second, "mlx5_0 unhealthy in the view", func() bool {
		v, _ = e.Agent.View()
		return !v.Snapshot.Healthy["mlx5_0"] && v.Pools[0].Allocatable == 9 && v.Pools[0].Capacity == 10
	})
	if s := e.Agent.State(); s.NodeState != nil {
		t.Errorf("/state nodeState %v without a publisher", s.NodeState)
	}
}
