package deviceplugin_test

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

func TestNetlinkNetnsMode(t *testing.T) {
	mode, err := deviceplugin.NetlinkNetnsMode{}.NetnsMode()
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

// pokeSource is an EventSource the test fires by hand.
type pokeSource chan struct{}

func (p pokeSource) Run(ctx context.Context, poke func(nodewatch.Event)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p:
			poke(nodewatch.Event{})
		}
	}
}

func TestEventTriggersImmediateReread(t *testing.T) {
	src := make(pokeSource)
	e := start(t, nodesim.HGX(), func(c *deviceplugin.Config) {
		c.HealthInterval = time.Hour // only the event can make the change visible
		c.Events = []deviceplugin.EventSource{src}
	})
	e.waitFor(t, 5*time.Second, "healthy", hasHealth(hca, "0000:18:00.0", pluginapi.Healthy))
	if err := e.tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	src <- struct{}{}
	e.waitFor(t, time.Second, "unhealthy after an event", hasHealth(hca, "0000:18:00.0", pluginapi.Unhealthy))
}
