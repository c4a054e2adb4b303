package deviceplugin_test

import (
	"context"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
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

// TestNetlinkEventsPoke: the default event source (nodewatch.Netlink) pokes
// on link and address updates in the namespace it follows.
func TestNetlinkEventsPoke(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pokes := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- nodewatch.Netlink{Namespace: ns.Handle}.Run(ctx, func(nodewatch.Event) {
			select {
			case pokes <- struct{}{}:
			default:
			}
		})
	}()
	h := netnstest.Handle(t, ns)
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	// The subscription may start after the first change; toggle lo until
	// an update is seen.
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		set := h.LinkSetUp
		if i%2 == 1 {
			set = h.LinkSetDown
		}
		if err := set(lo); err != nil {
			t.Fatalf("toggle lo: %v", err)
		}
		select {
		case <-pokes:
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			return
		case <-deadline.C:
			t.Fatal("no poke within 5s of link updates")
		case <-tick.C:
		}
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
