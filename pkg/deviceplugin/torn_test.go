package deviceplugin_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestTornPoolFileWrittenAgain: a pool.json the CNI plugin found torn and
// moved aside is written again by the daemon, with no change of the pool
// to trigger it (the agent's FilesInterval check).
func TestTornPoolFileWrittenAgain(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, alignedConfig)
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.NetnsMode = fakeNetns{Mode: rdma.NetnsExclusive}
		c.AllocDir = t.TempDir()
		c.CDIDir = filepath.Join(t.TempDir(), "cdi")
		c.FilesInterval = 50 * time.Millisecond
	})
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	want := readPoolFile(t, e)
	path := allocdir.PoolFilePath(e.Cfg.AllocDir, "gpu-nics")
	if err := os.WriteFile(path, []byte(`{"version":2,"pool":"gpu-ni`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The CNI's read moves it aside.
	var d *quarantine.Damaged
	if _, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics"); !errors.As(err, &d) || d.Moved == "" {
		t.Fatalf("ReadPoolFile of the torn file = %v, want it moved aside", err)
	}
	poll(t, 5*time.Second, "pool.json written again", func() bool {
		f, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics")
		return err == nil && f.Pool == want.Pool && len(f.Members) == len(want.Members)
	})
}
