package nodewatch_test

import (
	"context"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

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
	netnstest.ChurnUntil(t, ns, func() bool {
		select {
		case <-pokes:
			return true
		default:
			return false
		}
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}
