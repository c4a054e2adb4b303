package agent_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// fakeDRA is a DRA front end that records what the agent hands it.
type fakeDRA struct {
	mu    sync.Mutex
	calls int
	pools map[string][]string // pool -> members' RDMA names
	down  []string            // unhealthy members of the dra pools
}

func (f *fakeDRA) Start(context.Context, agent.Node) error { return nil }
func (f *fakeDRA) Status() []agent.PoolStatus              { return nil }
func (f *fakeDRA) Stop()                                   {}

func (f *fakeDRA) Update(u agent.Update) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.pools = map[string][]string{}
	f.down = nil
	for _, a := range u.Pools {
		if a.Refused != "" {
			continue
		}
		name := a.Pool.Name
		f.pools[name] = []string{}
		for _, d := range a.Members {
			f.pools[name] = append(f.pools[name], d.Name)
			if !u.Healthy[d.Name] {
				f.down = append(f.down, d.Name)
			}
		}
		slices.Sort(f.pools[name])
	}
	slices.Sort(f.down)
	return nil
}

func (f *fakeDRA) get() (map[string][]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.pools), slices.Clone(f.down)
}

// TestDRAPoolsGoToTheDRAFrontend: a pool with frontend dra is published
// through the DRA front end and never registered with the kubelet; a port
// going down and up reaches the front end; a reload that moves the pool to
// the device plugin takes it away from the front end.
func TestDRAPoolsGoToTheDRAFrontend(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n"+
		"- {name: roce, mode: exclusive, nccl: false, selectors: {linkLayers: [Ethernet]}}\n")
	fake := &fakeDRA{}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf; c.DRA = fake })
	e.WaitFor(t, 5*time.Second, "roce pool", func(k *kubeletstub.Kubelet) bool { d, _ := k.Devices("rdma.example.com/roce"); return len(d) == 2 })
	ib := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	poll(t, 2*time.Second, "ib pool published through DRA", func() bool {
		p, _ := fake.get()
		return cmp.Equal(p, map[string][]string{"ib": ib})
	})
	for _, r := range e.Kubelet.Registrations() {
		if r.ResourceName == "rdma.example.com/ib" {
			t.Errorf("the dra pool registered with the kubelet")
		}
	}
	if _, err := os.Stat(filepath.Join(e.Cfg.KubeletDir, deviceplugin.SocketName("ib"))); !os.IsNotExist(err) {
		t.Errorf("the dra pool has a device plugin socket: %v", err)
	}

	if err := e.Tree.SetPortState("mlx5_3", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "port down reaches the DRA front end", func() bool {
		_, down := fake.get()
		return cmp.Equal(down, []string{"mlx5_3"})
	})
	poll(t, 2*time.Second, "/state shows the dra pool", func() bool {
		st := e.Agent.State()
		if len(st.DRAPools) != 1 || st.DRAPools[0].Name != "ib" || len(st.DRAPools[0].Devices) != 8 {
			return false
		}
		var down []string
		for _, dev := range st.DRAPools[0].Devices {
			if !dev.Healthy {
				down = append(down, dev.RDMADevice)
			}
		}
		return cmp.Equal(down, []string{"mlx5_3"})
	})
	// The view the NRI plugin reads has the dra pool apart, with its members and memlock
	// limit: a claim's container gets the pool's limit (before, DRA pools were not in it).
	v, _ := e.Agent.View()
	if len(v.DRAPools) != 1 || v.DRAPools[0].Name != "ib" || !cmp.Equal(v.DRAPools[0].Members, ib) ||
		v.DRAPools[0].Memlock == 0 || slices.ContainsFunc(v.Pools, func(p agent.PoolView) bool { return p.Name == "ib" }) {
		t.Errorf("view: DRAPools %+v, Pools %+v; want the ib pool in DRAPools only, its 8 members, a memlock limit", v.DRAPools, v.Pools)
	}
	if err := e.Tree.SetPortState("mlx5_3", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "port up reaches the DRA front end", func() bool {
		_, down := fake.get()
		return len(down) == 0
	})

	// The pool moves to the device plugin: registered there, gone from DRA.
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n"+
		"- {name: roce, mode: exclusive, nccl: false, selectors: {linkLayers: [Ethernet]}}\n")
	e.WaitFor(t, 5*time.Second, "ib pool on the device plugin", func(k *kubeletstub.Kubelet) bool {
		d, _ := k.Devices("rdma.example.com/ib")
		return len(d) == 8
	})
	poll(t, 2*time.Second, "ib pool unpublished from DRA", func() bool {
		p, _ := fake.get()
		return p != nil && len(p) == 0
	})
}

// TestDRAPoolRefusedWithoutFrontend: without a DRA front end a dra pool is
// not served, and /state says why; the other pools run.
func TestDRAPoolRefusedWithoutFrontend(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n"+
		"- {name: roce, mode: exclusive, nccl: false, selectors: {linkLayers: [Ethernet]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf })
	e.WaitFor(t, 5*time.Second, "roce pool", func(k *kubeletstub.Kubelet) bool { d, _ := k.Devices("rdma.example.com/roce"); return len(d) == 2 })
	st := e.Agent.State()
	found := false
	for _, p := range st.Problems {
		found = found || strings.Contains(p, `pool "ib" has frontend dra but the daemon runs without the DRA front end`)
	}
	if !found {
		t.Errorf("problems %q do not explain the dra pool", st.Problems)
	}
	if _, ok := e.Kubelet.Devices("rdma.example.com/ib"); ok {
		t.Errorf("the dra pool reached the kubelet")
	}
}

// refusingDRA is a fakeDRA that refuses the shared pools once told to
// (agent.PoolRefuser), as the DRA front end does when the API server
// lacks DRAConsumableCapacity.
type refusingDRA struct {
	fakeDRA
	rmu     sync.Mutex
	refuse  bool
	changed chan struct{}
}

func (f *refusingDRA) Refusal(p config.Pool) string {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	if f.refuse && p.Mode == config.Shared {
		return "pool " + p.Name + " refused: no DRAConsumableCapacity"
	}
	return ""
}

func (f *refusingDRA) Refusals() <-chan struct{} {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	return f.changed
}

func (f *refusingDRA) startRefusing() {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.refuse = true
	close(f.changed)
	f.changed = make(chan struct{})
}

// TestDRAPoolRefusedByTheFrontEnd: a front end's refusal learned after
// start (a shared dra pool on an API server without consumable capacity)
// takes the pool from the front end and puts the reason in /state's
// problems; the exclusive dra pool stays.
func TestDRAPoolRefusedByTheFrontEnd(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: shared, frontend: dra, slots: 3, selectors: {linkLayers: [InfiniBand], rdmaDevices: [mlx5_0]}}\n"+
		"- {name: ib2, mode: exclusive, frontend: dra, nccl: false, selectors: {linkLayers: [InfiniBand], rdmaDevices: [mlx5_1]}}\n")
	fake := &refusingDRA{changed: make(chan struct{})}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf; c.DRA = fake })
	poll(t, 2*time.Second, "both dra pools served", func() bool {
		p, _ := fake.get()
		return cmp.Equal(p, map[string][]string{"ib": {"mlx5_0"}, "ib2": {"mlx5_1"}})
	})
	fake.startRefusing()
	poll(t, 2*time.Second, "the shared pool taken away", func() bool {
		p, _ := fake.get()
		return cmp.Equal(p, map[string][]string{"ib2": {"mlx5_1"}})
	})
	poll(t, 2*time.Second, "the refusal in /state's problems", func() bool {
		return slices.ContainsFunc(e.Agent.State().Problems, func(p string) bool { return strings.Contains(p, "DRAConsumableCapacity") })
	})
}
