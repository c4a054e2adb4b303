package deviceplugin_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

const hca = "rdma.kube-rdma.io/hca"

func dev(id string, numa int64) *pluginapi.Device {
	d := &pluginapi.Device{ID: id, Health: pluginapi.Healthy}
	if numa >= 0 {
		d.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: numa}}}
	}
	return d
}

func TestRegistration(t *testing.T) {
	e := start(t, nodesim.HGX(), nil)
	e.WaitFor(t, 5*time.Second, "device list", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok })
	regs := e.Kubelet.Registrations()
	if len(regs) != 1 {
		t.Fatalf("got %d registrations, want 1", len(regs))
	}
	want := &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "kube-rdma-hca.sock", ResourceName: hca,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}}
	if diff := cmp.Diff(want, regs[0], protocmp.Transform()); diff != "" {
		t.Errorf("registration (-want +got)\n%s", diff)
	}
	got, _ := e.Kubelet.Devices(hca)
	wantDevs := []*pluginapi.Device{
		dev("0000:18:00.0", 0), dev("0000:27:00.0", 0), dev("0000:3a:00.0", 0), dev("0000:4b:00.0", 0),
		dev("0000:5c:00.0", 0), dev("0000:9a:00.0", 1), dev("0000:a8:00.0", 1), dev("0000:ba:00.0", 1),
		dev("0000:ca:00.0", 1), dev("0000:da:00.0", 1),
	}
	if diff := cmp.Diff(wantDevs, got, protocmp.Transform()); diff != "" {
		t.Errorf("devices (-want +got)\n%s", diff)
	}
}

func TestTopologyOmittedWhenNUMAUnknown(t *testing.T) {
	e := start(t, nodesim.VM(), nil)
	e.WaitFor(t, 5*time.Second, "device list", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok })
	got, _ := e.Kubelet.Devices(hca)
	want := []*pluginapi.Device{dev("0002:00:00.0", -1), dev("0004:00:00.0", -1)}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("devices (-want +got)\n%s", diff)
	}
}

func TestKubeletRestartReregistersWithinOneSecond(t *testing.T) {
	e := start(t, nodesim.HGX(), nil)
	e.WaitFor(t, 5*time.Second, "first registration", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok })
	for i := range 3 {
		if err := e.Kubelet.Restart(); err != nil {
			t.Fatal(err)
		}
		took := e.WaitFor(t, time.Second, "re-registration", func(k *kubeletstub.Kubelet) bool {
			devs, ok := k.Devices(hca)
			return ok && len(devs) == 10
		})
		t.Logf("restart %d: re-registered and listed in %s", i+1, took)
		if n := len(e.Kubelet.Registrations()); n != i+2 {
			t.Errorf("after restart %d: %d registrations, want %d", i+1, n, i+2)
		}
	}
}

func TestPortDownIsUnhealthyAndRecovers(t *testing.T) {
	e := start(t, nodesim.HGX(), nil)
	e.WaitFor(t, 5*time.Second, "healthy", hasHealth(hca, "0000:3a:00.0", pluginapi.Healthy))
	if err := os.WriteFile(filepath.Join(e.Tree.SysRoot, "class/infiniband/mlx5_1/ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	took := e.WaitFor(t, time.Second, "unhealthy after port down", hasHealth(hca, "0000:3a:00.0", pluginapi.Unhealthy))
	t.Logf("unhealthy after %s", took)
	if h := health(e.Kubelet, hca)["0000:18:00.0"]; h != pluginapi.Healthy {
		t.Errorf("mlx5_0 is %s, want Healthy", h)
	}
	if err := e.Tree.SetPortState("mlx5_1", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	took = e.WaitFor(t, time.Second, "healthy again", hasHealth(hca, "0000:3a:00.0", pluginapi.Healthy))
	t.Logf("healthy again after %s", took)
}

func TestPortDownAtStart(t *testing.T) {
	e := start(t, nodesim.PortDown(), nil)
	e.WaitFor(t, 5*time.Second, "list", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 2 })
	want := map[string]string{"0000:18:00.0": pluginapi.Healthy, "0000:3a:00.0": pluginapi.Unhealthy}
	if diff := cmp.Diff(want, health(e.Kubelet, hca)); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
}

func TestDeviceRemovedAndBack(t *testing.T) {
	topo := nodesim.HGX()
	e := start(t, topo, nil)
	e.WaitFor(t, 5*time.Second, "list", func(k *kubeletstub.Kubelet) bool { return len(health(k, hca)) == 10 })
	if err := e.Tree.RemoveRDMA("mlx5_2"); err != nil {
		t.Fatal(err)
	}
	// Unhealthy at once, gone after the agent's grace (2 health intervals:
	// a record of the CNI plugin may yet say it is lent to a pod).
	took := e.WaitFor(t, time.Second, "device unhealthy", hasHealth(hca, "0000:4b:00.0", pluginapi.Unhealthy))
	t.Logf("unhealthy in ListAndWatch after %s", took)
	took = e.WaitFor(t, 2*time.Second, "device gone", func(k *kubeletstub.Kubelet) bool {
		_, present := health(k, hca)["0000:4b:00.0"]
		return len(health(k, hca)) == 9 && !present
	})
	t.Logf("removed from ListAndWatch %s later", took)
	if _, err := e.Kubelet.Allocate(context.Background(), hca, []string{"0000:4b:00.0"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of a removed device: got %v, want InvalidArgument", err)
	}
	if err := e.Tree.AddRDMA(topo.RDMA[2]); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, time.Second, "device back", hasHealth(hca, "0000:4b:00.0", pluginapi.Healthy))
}

func TestSocketsRemovedOnStop(t *testing.T) {
	e := start(t, nodesim.HGX(), nil)
	sock := filepath.Join(e.Cfg.KubeletDir, deviceplugin.SocketName("hca"))
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("socket while running: %v", err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket after stop: %v, want not exist", err)
	}
}

func TestNetnsModeExclusiveWithSharedPool(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: roce, mode: shared, slots: 4, selectors: {linkLayers: [Ethernet]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.NetnsMode = fakeNetns{Mode: rdma.NetnsExclusive}
	})
	st := e.Agent.State()
	if st.RDMANetnsMode != "exclusive" {
		t.Errorf("state netns mode %q, want exclusive", st.RDMANetnsMode)
	}
	want := []string{`pool "roce" is shared but the RDMA subsystem is in exclusive netns mode: a device can be in one network namespace only, so pods cannot share it`}
	if diff := cmp.Diff(want, st.Problems); diff != "" {
		t.Errorf("problems (-want +got)\n%s", diff)
	}
	body := scrape(t, e.Agent, "/metrics")
	for _, line := range []string{
		`kube_rdma_device_plugin_rdma_netns_mode{mode="exclusive"} 1`,
		`kube_rdma_device_plugin_config_problems 1`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("metrics lack %q", line)
		}
	}
}

func TestNetnsModeUnknown(t *testing.T) {
	e := start(t, nodesim.SoftRoCE(), func(c *agenttest.Config) { c.NetnsMode = fakeNetns{Err: errAny} })
	if got := e.Agent.State().RDMANetnsMode; got != "unknown" {
		t.Errorf("netns mode %q, want unknown", got)
	}
}

func TestKubeletStartsLater(t *testing.T) {
	e := start(t, nodesim.SoftRoCE(), nil)
	e.WaitFor(t, 5*time.Second, "first registration", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok })
	e.Kubelet.Stop() // kubelet down: kubelet.sock gone, plugin keeps serving
	begin := time.Now()
	k2, err := kubeletstub.Start(e.Cfg.KubeletDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := k2.WaitFor(ctx, func(k *kubeletstub.Kubelet) bool {
		d, ok := k.Devices(hca)
		return ok && len(d) == 1
	}); err != nil {
		t.Fatalf("no registration with the new kubelet within 1s: %v", err)
	}
	t.Logf("registered with the new kubelet after %s", time.Since(begin))
}

// TestRegistrationRetries: while kubelet.sock refuses connections (a kubelet
// that is starting), registration fails and is retried with back-off until
// a kubelet answers.
func TestRegistrationRetries(t *testing.T) {
	e := start(t, nodesim.SoftRoCE(), nil)
	e.WaitFor(t, 5*time.Second, "first registration", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok })
	e.Kubelet.Stop()
	// A socket file nobody listens on: connections are refused.
	l, err := net.Listen("unix", filepath.Join(e.Cfg.KubeletDir, deviceplugin.KubeletSocket))
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	failures := `kube_rdma_device_plugin_registrations_total{pool="hca",result="failure"}`
	poll(t, 3*time.Second, "three failed registrations", func() bool {
		var n int
		_, err := fmt.Sscanf(strings.TrimPrefix(metricLine(scrape(t, e.Agent, "/metrics"), failures), failures+" "), "%d", &n)
		return err == nil && n >= 3
	})
	k2, err := kubeletstub.Start(e.Cfg.KubeletDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k2.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := k2.WaitFor(ctx, func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(hca); return ok }); err != nil {
		t.Fatalf("no registration with the kubelet that answers: %v", err)
	}
}
