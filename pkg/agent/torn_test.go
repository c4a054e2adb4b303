package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/quarantine"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
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
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.PoolsFile = path
		c.AllocDir = filepath.Dir(path)
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
	// Counted: the file in quarantine, by kind; a pool file moved aside
	// into the same directory counts apart.
	body := scrape(t, e.Agent, "/metrics")
	for _, line := range []string{`kube_rdma_device_plugin_quarantined_files{kind="pools"} 1`, `kube_rdma_device_plugin_quarantined_files{kind="pool"} 0`} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), allocdir.QuarantineDir, "gpu-nics.pool.json.20260102T150405Z"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if body := scrape(t, e.Agent, "/metrics"); !strings.Contains(body, `kube_rdma_device_plugin_quarantined_files{kind="pool"} 1`) {
		t.Errorf("/metrics does not count the pool file:\n%s", grepLines(body, "quarantined"))
	}
}

// TestQuarantinedFilesOfOtherKinds: Config.QuarantineDirs are counted by
// their kind; a directory not there yet is 0.
func TestQuarantinedFilesOfOtherKinds(t *testing.T) {
	dir := t.TempDir()
	claims, records := filepath.Join(dir, "claims", "quarantine"), filepath.Join(dir, "cni", "quarantine")
	if err := os.MkdirAll(claims, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"uid-1.json.20260102T150405Z", "uid-2.json.20260102T150405Z"} {
		if err := os.WriteFile(filepath.Join(claims, name), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.QuarantineDirs = map[string]string{"claim": claims, "attachment": records}
	})
	body := scrape(t, e.Agent, "/metrics")
	for _, line := range []string{`kube_rdma_device_plugin_quarantined_files{kind="claim"} 2`, `kube_rdma_device_plugin_quarantined_files{kind="attachment"} 0`} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(body, "quarantined"))
		}
	}
}

func grepLines(body, word string) string {
	var out []string
	for line := range strings.Lines(body) {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}
