package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestTornPoolsFileWrittenAgain: the node's pools file, found torn and
// moved aside by the CNI plugin, is written again by the daemon though no
// pool changed (Config.FilesInterval).
func TestTornPoolsFileWrittenAgain(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	path := nodepools.Path(filepath.Join(dir, "alloc"))
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n")
	start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.PoolsFile = path
		c.FilesInterval = 50 * time.Millisecond
	})
	var want nodepools.File
	poll(t, 5*time.Second, "pools file", func() bool {
		var err error
		want, err = nodepools.Read(path)
		return err == nil && len(want.Pools) == 1
	})
	if err := os.WriteFile(path, []byte(`{"version":1,"pools":[{"name":"i`), 0o644); err != nil {
		t.Fatal(err)
	}
	var d *quarantine.Damaged
	if _, err := nodepools.Read(path); !errors.As(err, &d) || d.Moved == "" {
		t.Fatalf("Read of the torn file = %v, want it moved aside", err)
	}
	poll(t, 5*time.Second, "pools file written again", func() bool {
		f, err := nodepools.Read(path)
		return err == nil && len(f.Pools) == 1 && len(f.Pools[0].Devices) == len(want.Pools[0].Devices)
	})
}
