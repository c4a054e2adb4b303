package deviceplugin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
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

// TestCDISpecFollowsAllocate: the runtime resolves the CDI names of an
// Allocate response in the pool's spec when it creates the container,
// minutes later on a loaded node. A spec that is gone or names other devices
// (overwritten, or torn and moved aside) is written again from the members by
// the Allocate that names its devices, and by the files ticker without one.
func TestCDISpecFollowsAllocate(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, roceConfig)
	run := func(files time.Duration) (*env, string, func() bool) {
		e := start(t, nodesim.RoCESRIOV(), func(c *agenttest.Config) {
			c.ConfigFile = conf
			c.CDIDir = filepath.Join(t.TempDir(), "cdi")
			c.FilesInterval = files
		})
		e.WaitFor(t, 5*time.Second, "pool pf listed", func(k *kubeletstub.Kubelet) bool {
			_, ok := k.Devices("rdma.example.com/pf")
			return ok
		})
		path := filepath.Join(e.Cfg.CDIDir, "kube-rdma-pf.json")
		poll(t, 5*time.Second, "spec written", func() bool { _, err := os.Stat(path); return err == nil })
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return e, path, func() bool { got, err := os.ReadFile(path); return err == nil && bytes.Equal(got, want) }
	}

	// Gone: the Allocate writes it before it answers (the files ticker, every
	// minute here, does not run during the test).
	e, path, same := run(time.Minute)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Kubelet.Allocate(context.Background(), "rdma.example.com/pf", []string{"0000:95:00.0"}); err != nil {
		t.Fatal(err)
	}
	if !same() {
		t.Fatal("after Allocate, the spec is not the pool's")
	}

	// Another pool's spec in the file, no Allocate: the files ticker puts the pool's back.
	e, path, same = run(50 * time.Millisecond)
	other, err := os.ReadFile(filepath.Join(e.Cfg.CDIDir, "kube-rdma-sf.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(other))
	poll(t, 5*time.Second, "the pool's spec written again by the files ticker", same)

	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("spec after Stop: %v, want it gone", err)
	}
}
