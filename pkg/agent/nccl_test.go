package agent_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestNCCLPoolsReported: a configuration with one pool per rail, each setting
// NCCL's variables, loads and is served (an earlier release accepted it); the
// node's state names the NCCL pools that have devices here, and not one
// whose devices the node lacks. Once one of them sets nccl: false the
// problem is gone.
func TestNCCLPoolsReported(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: rail0, mode: exclusive, selectors: {rdmaDevices: [mlx5_0]}}\n"+
		"- {name: rail1, mode: exclusive, selectors: {rdmaDevices: [mlx5_1]}}\n"+
		"- {name: elsewhere, mode: exclusive, selectors: {rdmaDevices: [mlx5_99]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf })
	for _, pool := range []string{"rail0", "rail1"} {
		e.WaitFor(t, 5*time.Second, pool+" served", func(k *kubeletstub.Kubelet) bool {
			d, _ := k.Devices("rdma.example.com/" + pool)
			return len(d) == 1
		})
	}
	reported := func() bool {
		return slices.ContainsFunc(e.Agent.State().Problems, func(p string) bool {
			return strings.HasPrefix(p, `pools "rail0", "rail1" all set NCCL's variables`)
		})
	}
	if !reported() {
		t.Fatalf("problems %q do not name the two NCCL pools with devices", e.Agent.State().Problems)
	}
	if slices.ContainsFunc(e.Agent.State().Problems, func(p string) bool { return strings.Contains(p, "elsewhere") }) {
		t.Errorf("problems %q name a pool without devices on the node", e.Agent.State().Problems)
	}

	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: rail0, mode: exclusive, selectors: {rdmaDevices: [mlx5_0]}}\n"+
		"- {name: rail1, mode: exclusive, nccl: false, selectors: {rdmaDevices: [mlx5_1]}}\n")
	poll(t, 5*time.Second, "the problem gone with nccl: false on rail1", func() bool { return !reported() })
}
