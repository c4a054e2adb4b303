package agent_test

import (
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

func TestNetlinkNetnsMode(t *testing.T) {
	mode, err := agent.NetlinkNetnsMode{}.NetnsMode()
	if err != nil {
		t.Logf("kernel does not say (no RDMA netlink): %v; the daemon reports %q", err, mode)
		if mode != rdma.NetnsUnknown {
			t.Errorf("mode on error = %q, want unknown", mode)
		}
		return
	}
	if mode != rdma.NetnsShared && mode != rdma.NetnsExclusive {
		t.Errorf("mode %q, want shared or exclusive", mode)
	}
}

func TestEventTriggersImmediateReread(t *testing.T) {
	src := make(agenttest.PokeSource)
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.HealthInterval = time.Hour // only the event can make the change visible
		c.Events = []agent.EventSource{src}
	})
	e.WaitFor(t, 5*time.Second, "healthy", hasHealth(hca, "0000:18:00.0", pluginapi.Healthy))
	before := time.Now()
	if err := e.Tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	src <- struct{}{}
	e.WaitFor(t, time.Second, "unhealthy after an event", hasHealth(hca, "0000:18:00.0", pluginapi.Unhealthy))
	// /state says since when: the re-read that found the port down.
	var since *time.Time
	poll(t, time.Second, "/state unhealthy", func() bool {
		for _, p := range e.Agent.State().Pools {
			for _, d := range p.Devices {
				if p.Resource == hca && d.ID == "0000:18:00.0" && d.Health == "Unhealthy" {
					since = d.HealthSince
					return true
				}
			}
		}
		return false
	})
	if since == nil || since.Before(before) || since.After(time.Now()) {
		t.Errorf("/state healthSince %v, want between the port change (%s) and now", since, before.Format(time.StampMicro))
	}
}
