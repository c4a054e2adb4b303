package deviceplugin_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestChangedPoolReregisters changes a shared pool's slot count: the pool is
// served again and must register again, so the kubelet follows the new
// endpoint and sees the new slots.
func TestChangedPoolReregisters(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	pools := func(slots string) string {
		return "resourcePrefix: rdma.example.com\npools:\n" +
			"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n" +
			"- {name: roce, mode: shared, nccl: false, slots: " + slots + ", selectors: {linkLayers: [Ethernet]}}\n"
	}
	writeFile(t, conf, pools("2"))
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf })
	e.WaitFor(t, 5*time.Second, "roce pool", func(k *kubeletstub.Kubelet) bool { d, _ := k.Devices("rdma.example.com/roce"); return len(d) == 2 })
	count := func(k *kubeletstub.Kubelet, resource string) int {
		n := 0
		for _, r := range k.Registrations() {
			if r.ResourceName == resource {
				n++
			}
		}
		return n
	}
	for i, slots := range []string{"3", "5"} {
		want := int(slots[0] - '0')
		writeFile(t, conf, pools(slots))
		took := e.WaitFor(t, time.Second, "re-registration with "+slots+" slots", func(k *kubeletstub.Kubelet) bool {
			d, _ := k.Devices("rdma.example.com/roce")
			return count(k, "rdma.example.com/roce") == i+2 && len(d) == want
		})
		t.Logf("%s slots: re-registered and listed in %s", slots, took)
	}
	if n := count(e.Kubelet, "rdma.example.com/ib"); n != 1 {
		t.Errorf("unchanged ib pool registered %d times, want 1", n)
	}
}

// TestLateVFPortsWithEventStorm adds a device whose ports/ appear 1.2 s
// after its class/infiniband link while events poke the daemon a hundred
// times a second: retries are bounded by time, not by events, and the device
// becomes Healthy.
func TestLateVFPortsWithEventStorm(t *testing.T) {
	src := make(agenttest.PokeSource)
	topo := nodesim.HGX()
	e := start(t, topo, func(c *agenttest.Config) { c.Events = []agent.EventSource{src} })
	e.WaitFor(t, 5*time.Second, "list", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 10 })
	if err := e.Tree.RemoveRDMA("mlx5_2"); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 2*time.Second, "device gone", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 9 })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stormDone := make(chan struct{})
	go func() {
		defer close(stormDone)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				select {
				case src <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	defer func() { cancel(); <-stormDone }()

	late := topo.RDMA[2]
	ports := late.Ports
	late.Ports = nil
	if err := e.Tree.AddRDMA(late); err != nil {
		t.Fatal(err)
	}
	ib, err := filepath.EvalSymlinks(filepath.Join(e.Tree.SysRoot, "class/infiniband/mlx5_2"))
	if err != nil {
		t.Fatal(err)
	}
	// The ports appear 1.2 s later, in one rename, as a probing driver adds them.
	appear := time.NewTimer(1200 * time.Millisecond)
	<-appear.C
	tmp := filepath.Join(filepath.Dir(ib), ".ports-tmp")
	p := ports[0]
	for name, v := range map[string]string{
		"state": nodesim.StateString(p.State), "phys_state": nodesim.PhysStateString(p.PhysState),
		"link_layer": p.LinkLayer, "rate": p.Rate, "gids/0": p.GIDs[0].GID,
	} {
		path := filepath.Join(tmp, "1", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(ib, "ports")); err != nil {
		t.Fatal(err)
	}
	took := e.WaitFor(t, 5*time.Second, "late device healthy", hasHealth(hca, "0000:4b:00.0", pluginapi.Healthy))
	t.Logf("healthy %s after its ports appeared", took)
}

// TestGIDChangeReachesAllocate adds IPv4 GIDs to a VF port (an address added
// to its netdev) and pokes an address event: Allocate follows with the new
// RoCE v2 index. (The CDI spec carries device nodes only; TestAllocateCDI.)
func TestGIDChangeReachesAllocate(t *testing.T) {
	src := make(agenttest.PokeSource)
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, roceConfig)
	e := start(t, nodesim.RoCESRIOV(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.HealthInterval = time.Hour // only the event can make the change visible
		c.Events = []agent.EventSource{src}
	})
	const vf = "rdma.example.com/vf-gpu0"
	e.WaitFor(t, 5*time.Second, "vf pool", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(vf); return ok })
	gidIndex := func() string {
		resp, err := e.Kubelet.Allocate(context.Background(), vf, []string{"0000:15:00.3"})
		if err != nil {
			t.Fatal(err)
		}
		return resp.ContainerResponses[0].Envs["NCCL_IB_GID_INDEX"]
	}
	if got := gidIndex(); got != "1" {
		t.Fatalf("GID index before: %s, want 1", got)
	}
	port := filepath.Join(e.Tree.SysRoot, "class/infiniband/mlx5_9/ports/1")
	v4 := "0000:0000:0000:0000:0000:ffff:0a01:0909"
	for i, typ := range map[string]string{"2": "IB/RoCE v1", "3": "RoCE v2"} {
		writeFile(t, filepath.Join(port, "gids", i), v4+"\n")
		writeFile(t, filepath.Join(port, "gid_attrs/types", i), typ+"\n")
		writeFile(t, filepath.Join(port, "gid_attrs/ndevs", i), "gpu0rdma0v1\n")
	}
	src <- struct{}{}
	poll(t, time.Second, "Allocate with the new GID index", func() bool { return gidIndex() == "3" })
}

// TestCDISpecsRemovedOnStop: a removed pool's CDI spec goes at once, and a
// normal exit removes the rest of the specs the daemon wrote, and only those.
func TestCDISpecsRemovedOnStop(t *testing.T) {
	cdi := filepath.Join(t.TempDir(), "cdi")
	if err := os.MkdirAll(cdi, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(cdi, "vendor-gpu.json")
	if err := os.WriteFile(other, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "config.yaml")
	ib := "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n"
	writeFile(t, conf, ib+"- {name: roce, mode: shared, nccl: false, slots: 2, selectors: {linkLayers: [Ethernet]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.CDIDir = cdi
		c.ConfigFile = conf
	})
	listing := func() []string {
		entries, err := os.ReadDir(cdi)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, x := range entries {
			got = append(got, x.Name())
		}
		return got
	}
	poll(t, 2*time.Second, "specs written", func() bool { return len(listing()) == 3 })
	writeFile(t, conf, ib)
	poll(t, 2*time.Second, "removed pool's spec removed", func() bool {
		return cmp.Equal([]string{"kube-rdma-ib.json", "vendor-gpu.json"}, listing())
	})
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"vendor-gpu.json"}, listing()); diff != "" {
		t.Errorf("CDI dir after stop (-want +got)\n%s", diff)
	}
}

// TestPreferredAllocationSkipsUnhealthyAndMixedLinkLayers: a preferred set
// never holds an unhealthy device, and holds one link layer when the
// available devices allow it.
func TestPreferredAllocationSkipsUnhealthyAndMixedLinkLayers(t *testing.T) {
	// The daemon fills allocator.Device.Unhealthy and LinkLayer from the
	// latest snapshot; Closest honours them.
	e := start(t, nodesim.HGX(), nil)
	e.WaitFor(t, 5*time.Second, "list", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 10 })
	if err := e.Tree.SetPortState("mlx5_0", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 2*time.Second, "mlx5_0 unhealthy", hasHealth(hca, "0000:18:00.0", pluginapi.Unhealthy))
	tests := []struct {
		name      string
		available []string
		want      []string
	}{
		// Every pair is on its own switch in NUMA 0; ties go to the lowest IDs.
		{"skips the unhealthy device", []string{"0000:18:00.0", "0000:3a:00.0", "0000:4b:00.0"}, []string{"0000:3a:00.0", "0000:4b:00.0"}},
		{"one link layer", []string{"0000:27:00.0", "0000:3a:00.0", "0000:4b:00.0"}, []string{"0000:3a:00.0", "0000:4b:00.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.Kubelet.GetPreferredAllocation(context.Background(), hca, tt.available, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}
