package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// fakeLent is the CNI plugin's records as the agent reads them: the RDMA
// devices lent to pods, and how often it was asked.
type fakeLent struct {
	mu    sync.Mutex
	lent  map[string]bool
	asked int
}

func (f *fakeLent) LentDevices() (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	out := map[string]bool{}
	for k, v := range f.lent {
		out[k] = v
	}
	return out, nil
}

func (f *fakeLent) set(names ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lent = map[string]bool{}
	for _, n := range names {
		f.lent[n] = true
	}
}

func (f *fakeLent) timesAsked() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// startLent runs the agent in the exclusive netns mode on a soft-RoCE node
// (rxe0 alone in the default pool hca), CDI on, with lent as its records
// and a short files interval (the records are read again at each).
func startLent(t *testing.T, lent *fakeLent) (*env, string) {
	t.Helper()
	cdi := filepath.Join(t.TempDir(), "cdi")
	e := start(t, nodesim.SoftRoCE(), func(c *agenttest.Config) {
		c.CDIDir = cdi
		c.NetnsMode = agenttest.FakeNetns{Mode: rdma.NetnsExclusive}
		c.FilesInterval = 50 * time.Millisecond
		c.Lent = lent
	})
	e.WaitFor(t, 5*time.Second, "rxe0 listed", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 1 })
	return e, filepath.Join(cdi, "kube-rdma-hca.json")
}

// rxe0 is the view's rxe0: its device as last handed to the pools, and
// whether the pool hca has it as a member.
func rxe0(e *env) (dev discovery.RDMADevice, member bool) {
	v, _ := e.Agent.View()
	if v.Snapshot != nil && v.Snapshot.Node != nil {
		for _, d := range v.Snapshot.Node.RDMADevices {
			if d.Name == "rxe0" {
				dev = d
			}
		}
	}
	for _, p := range v.Pools {
		if p.Name == "hca" {
			member = slices.Contains(p.Members, "rxe0")
		}
	}
	return dev, member
}

// holds checks cond for the whole of d, failing at the first miss: what
// must not change while the node watcher re-reads the node and a grace
// (2 health intervals, 1 s) would have run out.
func holds(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if msg := cond(); msg != "" {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keptAsLent is a holds condition: rxe0 still a member of hca with the data
// it had, Healthy for the kubelet (device id), its pool's CDI spec as it was.
func keptAsLent(e *env, wantDev discovery.RDMADevice, id, spec string, wantSpec []byte) func() string {
	return func() string {
		dev, member := rxe0(e)
		if !member {
			return "not a member of hca"
		}
		if diff := cmp.Diff(wantDev, dev); diff != "" {
			return "device changed (-want +got):\n" + diff
		}
		if h := health(e.Kubelet, hca)[id]; h != pluginapi.Healthy {
			return "kubelet health " + h
		}
		if got, err := os.ReadFile(spec); err != nil || !slices.Equal(got, wantSpec) {
			return "cdi spec changed or gone: " + string(got)
		}
		return ""
	}
}

// TestLentDeviceStaysMember: a device moved into a pod's network namespace
// (gone from the host's class/infiniband) while the records say it is lent
// stays a member of its pool, with the data it had and healthy, and the
// pool's CDI spec keeps it; once the record is gone and the device still
// away it is dropped (the pool's spec with it); back, it is served again.
func TestLentDeviceStaysMember(t *testing.T) {
	lent := &fakeLent{}
	e, spec := startLent(t, lent)
	var id string
	for k := range health(e.Kubelet, hca) {
		id = k
	}
	poll(t, 2*time.Second, "cdi spec written", func() bool { _, err := os.Stat(spec); return err == nil })
	wantSpec, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantDev, member := rxe0(e)
	if !member {
		t.Fatal("rxe0 is not a member of hca at start")
	}

	lent.set("rxe0")
	if err := e.Tree.RemoveRDMA("rxe0"); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "the records asked about the missing rxe0", func() bool { return lent.timesAsked() > 0 })
	holds(t, 1500*time.Millisecond, "lent rxe0", keptAsLent(e, wantDev, id, spec, wantSpec))

	lent.set() // DEL without the device back (it went with its pod)
	e.WaitFor(t, 2*time.Second, "rxe0 dropped", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 0 })
	poll(t, 2*time.Second, "the empty pool's spec removed", func() bool { _, err := os.Stat(spec); return os.IsNotExist(err) })
	// The view is published after the pool has served the kubelet and written its spec:
	// under the race detector on a slow host it can come after both (1.66 s into the test).
	poll(t, 2*time.Second, "rxe0 no longer a member after its record went", func() bool { _, member := rxe0(e); return !member })

	if err := e.Tree.AddRDMA(nodesim.SoftRoCE().RDMA[0]); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 2*time.Second, "rxe0 back", hasHealth(hca, id, pluginapi.Healthy))
	// Back with a new uverbs minor, as a re-registered device is.
	poll(t, 2*time.Second, "cdi spec back", func() bool {
		got, err := os.ReadFile(spec)
		return err == nil && strings.Contains(string(got), `"name": "rxe0"`)
	})
}

// TestLateRecordKeepsDevice: a device gone with no record is unhealthy
// for its grace; a record read within it keeps the device, healthy, a
// member for good.
func TestLateRecordKeepsDevice(t *testing.T) {
	lent := &fakeLent{}
	e, spec := startLent(t, lent)
	var id string
	for k := range health(e.Kubelet, hca) {
		id = k
	}
	if err := e.Tree.RemoveRDMA("rxe0"); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, time.Second, "rxe0 unhealthy in its grace", hasHealth(hca, id, pluginapi.Unhealthy))
	lent.set("rxe0")
	e.WaitFor(t, time.Second, "rxe0 healthy again", hasHealth(hca, id, pluginapi.Healthy))
	holds(t, 1500*time.Millisecond, "lent rxe0", func() string {
		if _, member := rxe0(e); !member {
			return "not a member of hca"
		}
		if h := health(e.Kubelet, hca)[id]; h != pluginapi.Healthy {
			return "kubelet health " + h
		}
		if _, err := os.Stat(spec); err != nil {
			return err.Error()
		}
		return ""
	})
}

// TestVanishedDeviceDroppedAfterGrace: without records (no --cni-state-dir)
// a device gone is unhealthy at once and dropped after the grace.
func TestVanishedDeviceDroppedAfterGrace(t *testing.T) {
	e := start(t, nodesim.SoftRoCE(), func(c *agenttest.Config) {
		c.NetnsMode = agenttest.FakeNetns{Mode: rdma.NetnsExclusive}
	})
	e.WaitFor(t, 5*time.Second, "rxe0 listed", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 1 })
	var id string
	for k := range health(e.Kubelet, hca) {
		id = k
	}
	if err := e.Tree.RemoveRDMA("rxe0"); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, time.Second, "rxe0 unhealthy", hasHealth(hca, id, pluginapi.Unhealthy))
	took := e.WaitFor(t, 3*time.Second, "rxe0 dropped", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 0 })
	t.Logf("dropped %s after unhealthy (grace %s)", took, 2*agent.DefaultHealthInterval)
}

// TestLentDeviceStaysInDRAPool: a device of a dra pool lent to a pod stays
// in the pool the DRA front end publishes (its ResourceSlice), healthy.
func TestLentDeviceStaysInDRAPool(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n")
	fake := &fakeDRA{}
	lent := &fakeLent{}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile, c.DRA, c.Lent = conf, fake, lent
		c.NetnsMode = agenttest.FakeNetns{Mode: rdma.NetnsExclusive}
	})
	ib := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	poll(t, 2*time.Second, "ib pool published", func() bool { p, _ := fake.get(); return cmp.Equal(p, map[string][]string{"ib": ib}) })
	lent.set("mlx5_2")
	if err := e.Tree.RemoveRDMA("mlx5_2"); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "the records asked about the missing mlx5_2", func() bool { return lent.timesAsked() > 0 })
	holds(t, 1500*time.Millisecond, "lent mlx5_2", func() string {
		p, down := fake.get()
		if diff := cmp.Diff(map[string][]string{"ib": ib}, p); diff != "" {
			return "pools (-want +got):\n" + diff
		}
		if len(down) != 0 {
			return fmt.Sprintf("unhealthy: %v", down)
		}
		return ""
	})
}

// TestRestartKeepsLentDevice: a daemon restarted while a device sits in a
// pod (exclusive RDMA netns mode: gone from the host's class/infiniband)
// keeps it in its pool, as the daemon before it last saw it, healthy, with
// the same CDI spec, from the lent-devices file; once the record goes it is
// dropped and the file removed. Without the file a restarted daemon does
// not list it: what the file is for.
func TestRestartKeepsLentDevice(t *testing.T) {
	lent := &fakeLent{}
	cdi := filepath.Join(t.TempDir(), "cdi")
	spec := filepath.Join(cdi, "kube-rdma-hca.json")
	file := filepath.Join(t.TempDir(), "_lent-devices.json")
	opts := func(lentFile string) func(c *agenttest.Config) {
		return func(c *agenttest.Config) {
			c.CDIDir = cdi
			c.NetnsMode = agenttest.FakeNetns{Mode: rdma.NetnsExclusive}
			c.FilesInterval = 50 * time.Millisecond
			c.Lent = lent
			c.LentFile = lentFile
		}
	}
	e := start(t, nodesim.SoftRoCE(), opts(file))
	e.WaitFor(t, 5*time.Second, "rxe0 listed", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 1 })
	var id string
	for k := range health(e.Kubelet, hca) {
		id = k
	}
	poll(t, 2*time.Second, "cdi spec written", func() bool { _, err := os.Stat(spec); return err == nil })
	wantSpec, err := os.ReadFile(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantDev, _ := rxe0(e)
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("lent-devices file with nothing lent: %v", err)
	}

	lent.set("rxe0")
	if err := e.Tree.RemoveRDMA("rxe0"); err != nil {
		t.Fatal(err)
	}
	poll(t, 2*time.Second, "rxe0 in the lent-devices file", func() bool {
		b, err := os.ReadFile(file)
		return err == nil && strings.Contains(string(b), `"name": "rxe0"`)
	})
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}

	restarted := func(lentFile string) *env {
		e2 := agenttest.StartOn(t, e.Tree, opts(lentFile))
		t.Cleanup(func() { _ = e2.Stop() })
		return e2
	}
	e2 := restarted(file)
	e2.WaitFor(t, 5*time.Second, "rxe0 listed by the restarted daemon", hasHealth(hca, id, pluginapi.Healthy))
	holds(t, 1500*time.Millisecond, "lent rxe0 after the restart", keptAsLent(e2, wantDev, id, spec, wantSpec))
	if err := e2.Stop(); err != nil {
		t.Fatal(err)
	}

	// The same restart without the file: rxe0 is not listed.
	e3 := restarted("")
	holds(t, 1500*time.Millisecond, "rxe0 without the file", func() string {
		if _, member := rxe0(e3); member {
			return "a member of hca with nothing to rebuild it from"
		}
		return ""
	})
	if err := e3.Stop(); err != nil {
		t.Fatal(err)
	}

	// The record gone (the pod gave it back without the device coming back):
	// dropped after its grace, the file removed.
	e4 := restarted(file)
	e4.WaitFor(t, 5*time.Second, "rxe0 listed again", hasHealth(hca, id, pluginapi.Healthy))
	lent.set()
	e4.WaitFor(t, 3*time.Second, "rxe0 dropped", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 0 })
	poll(t, 2*time.Second, "the lent-devices file removed", func() bool { _, err := os.Stat(file); return os.IsNotExist(err) })
}
