package deviceplugin_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestCDISpecOfEmptyPoolRemoved: a pool whose only device goes away leaves
// no CDI spec, rather than one with no devices, which the CDI registry
// refuses and with it every spec of the node (containerd: "invalid CDI
// Spec: invalid spec, no devices"); the device back, the spec is back.
func TestCDISpecOfEmptyPoolRemoved(t *testing.T) {
	topo := nodesim.SoftRoCE()
	cdi := filepath.Join(t.TempDir(), "cdi")
	e := start(t, topo, func(c *agenttest.Config) { c.CDIDir = cdi })
	path := filepath.Join(cdi, "kube-rdma-hca.json")
	exists := func() bool { _, err := os.Stat(path); return err == nil }
	poll(t, 2*time.Second, "spec written", exists)
	if err := e.Tree.RemoveRDMA("rxe0"); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "spec of the empty pool removed", func() bool { return !exists() })
	if err := e.Tree.AddRDMA(topo.RDMA[0]); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "spec written again", exists)
}
