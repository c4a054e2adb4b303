package agent_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestConfigReload(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf })
	e.WaitFor(t, 5*time.Second, "ib pool", func(k *kubeletstub.Kubelet) bool { d, _ := k.Devices("rdma.example.com/ib"); return len(d) == 8 })

	// A good file: the ib pool is unchanged and keeps running, a shared
	// RoCE pool appears.
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n"+
		"- {name: roce, mode: shared, nccl: false, slots: 2, selectors: {linkLayers: [Ethernet]}}\n")
	e.WaitFor(t, 2*time.Second, "roce pool", func(k *kubeletstub.Kubelet) bool {
		d, _ := k.Devices("rdma.example.com/roce")
		return len(d) == 2
	})
	var regs []string
	for _, r := range e.Kubelet.Registrations() {
		regs = append(regs, r.ResourceName)
	}
	if diff := cmp.Diff([]string{"rdma.example.com/ib", "rdma.example.com/roce"}, regs); diff != "" {
		t.Errorf("registrations (-want +got)\n%s", diff)
	}
	got, _ := e.Kubelet.Devices("rdma.example.com/roce")
	want := []*pluginapi.Device{
		{ID: "roce-0", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}, {ID: 1}}}},
		{ID: "roce-1", Health: pluginapi.Healthy, Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: 0}, {ID: 1}}}},
	}
	if diff := cmp.Diff(ids(want), ids(got)); diff != "" {
		t.Errorf("roce slots (-want +got)\n%s", diff)
	}
	if n := len(got[0].GetTopology().GetNodes()); n != 2 {
		t.Errorf("shared slot NUMA nodes: %d, want 2 (the union of its devices)", n)
	}

	// A bad file: rejected with the reason, the last good config keeps running.
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {}}\n")
	poll(t, 2*time.Second, "bad config reported", func() bool { return e.Agent.State().ConfigError != "" })
	st := e.Agent.State()
	if !strings.Contains(st.ConfigError, "pools[0].selectors: at least one selector is required") {
		t.Errorf("config error %q does not name the field", st.ConfigError)
	}
	if len(st.Pools) != 2 {
		t.Errorf("pools after a bad reload: %d, want 2 (the last good config)", len(st.Pools))
	}
	body := scrape(t, e.Agent, "/metrics")
	for _, line := range []string{
		`kube_rdma_device_plugin_config_last_reload_successful 0`,
		`kube_rdma_device_plugin_config_reloads_total{result="failure"} 1`,
		`kube_rdma_device_plugin_config_reloads_total{result="success"} 2`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if _, ok := e.Kubelet.Devices("rdma.example.com/roce"); !ok {
		t.Error("roce pool gone after a bad reload")
	}

	// Removing a pool stops it and removes its socket.
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n")
	sock := filepath.Join(e.Cfg.KubeletDir, deviceplugin.SocketName("roce"))
	poll(t, 2*time.Second, "roce socket removed with its pool", func() bool {
		_, err := os.Stat(sock)
		return os.IsNotExist(err)
	})
	if st := e.Agent.State(); st.ConfigError != "" {
		t.Errorf("config error after a good reload: %q", st.ConfigError)
	}
}

func TestMetrics(t *testing.T) {
	topo := nodesim.PortDown()
	e := start(t, topo, nil)
	e.WaitFor(t, 5*time.Second, "list", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 2 })
	cdir := filepath.Join(e.Tree.SysRoot, "class/infiniband/mlx5_0/ports/1/counters")
	hdir := filepath.Join(e.Tree.SysRoot, "class/infiniband/mlx5_0/ports/1/hw_counters")
	for dir, files := range map[string]map[string]string{
		cdir: {"port_rcv_data": "123456\n", "port_xmit_data": "42\n"},
		hdir: {"out_of_buffer": "7\n"},
	} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for n, v := range files {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The kubelet stand-in starts ListAndWatch from inside its Register
	// handler, so the list can be seen before the plugin's Register call has
	// returned and counted: wait for the count.
	body := scrapeUntil(t, e.Agent, "/metrics", `kube_rdma_device_plugin_registrations_total{pool="hca",result="success"} 1`)
	for _, line := range []string{
		`kube_rdma_device_plugin_devices{health="Healthy",pool="hca"} 1`,
		`kube_rdma_device_plugin_devices{health="Unhealthy",pool="hca"} 1`,
		`kube_rdma_device_plugin_registrations_total{pool="hca",result="success"} 1`,
		`kube_rdma_device_plugin_rdma_netns_mode{mode="shared"} 1`,
		`kube_rdma_device_plugin_config_last_reload_successful 1`,
		`kube_rdma_port_counter{counter="port_rcv_data",device="mlx5_0",port="1",source="counters"} 123456`,
		`kube_rdma_port_counter{counter="out_of_buffer",device="mlx5_0",port="1",source="hw_counters"} 7`,
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}
	if got := scrape(t, e.Agent, "/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if got := scrape(t, e.Agent, "/state"); !strings.Contains(got, `"rdmaNetnsMode": "shared"`) || !strings.Contains(got, `"nodeName": "node-a"`) {
		t.Errorf("/state lacks netns mode or node name:\n%s", got)
	}
}

// TestConfigMapUpdate swaps the ..data symlink as the kubelet does when a
// mounted ConfigMap changes.
func TestConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	version := func(name, pools string) {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, name, "config.yaml"), "resourcePrefix: rdma.example.com\npools:\n"+pools)
	}
	version("..v1", "- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/config.yaml", filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = filepath.Join(dir, "config.yaml") })
	e.WaitFor(t, 5*time.Second, "ib pool", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices("rdma.example.com/ib"); return ok })

	version("..v2", "- {name: eth, mode: exclusive, selectors: {linkLayers: [Ethernet]}}\n")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 2*time.Second, "eth pool after the swap", func(k *kubeletstub.Kubelet) bool {
		d, ok := k.Devices("rdma.example.com/eth")
		return ok && len(d) == 2
	})
	poll(t, 2*time.Second, "ib socket removed", func() bool {
		_, err := os.Stat(filepath.Join(e.Cfg.KubeletDir, deviceplugin.SocketName("ib")))
		return os.IsNotExist(err)
	})
}
