package nri

import (
	"bytes"
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"log/slog"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// fakeSource is a daemon with one exclusive pool hca of mlx5_0 (64Gi) and
// one shared pool roce of mlx5_2 (unlimited).
// fakeSource serves pools hca and roce (exclusive; shared by 4 with
// sharedRoce).
type fakeSource struct{ sharedRoce bool }

func (f fakeSource) View() (agent.View, <-chan struct{}) {
	snap := &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{
		{Name: "mlx5_0", CharDevices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0"},
			Ports: []discovery.Port{{Port: 1, State: "ACTIVE", LinkLayer: "InfiniBand"}}},
		{Name: "mlx5_2", CharDevices: []string{"/dev/infiniband/uverbs2"},
			Ports: []discovery.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", RoCEv2GIDIndexes: []int{3}}}},
	}}}
	roce := agent.PoolView{Name: "roce", Members: []string{"mlx5_2"}, Memlock: ^uint64(0), CDIDevices: []string{"rdma.kube-rdma.io/roce=all"}}
	if f.sharedRoce {
		roce.Mode, roce.Slots = config.Shared, 4
	}
	return agent.View{Snapshot: snap, Pools: []agent.PoolView{
		{Name: "hca", Members: []string{"mlx5_0"}, Memlock: 64 * gi, CDIDevices: []string{"rdma.kube-rdma.io/hca=0000:18:00.0"}},
		roce,
	}}, make(chan struct{})
}

// syncBuffer is a log sink the plugin's goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runPlugin runs p until the test ends; Run must then return nil.
func runPlugin(t *testing.T, p *Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("plugin Run: %v", err)
		}
	})
}

func startPlugin(t *testing.T, socket string, logs *syncBuffer) *Plugin {
	t.Helper()
	p := New(Config{Socket: socket, Source: fakeSource{}, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	runPlugin(t, p)
	return p
}

// TestPluginNoSocket: NRI off in the runtime. The plugin retries, says so
// once in the log, in its report and in kube_rdma_nri_connected, and Run
// does not fail.
func TestPluginNoSocket(t *testing.T) {
	logs := &syncBuffer{}
	socket := filepath.Join(t.TempDir(), "nri.sock")
	p := startPlugin(t, socket, logs)
	waitFor(t, "three connection attempts", func() bool { return p.Report().Attempts >= 3 })
	r := p.Report()
	if !r.Enabled || r.Connected || !strings.Contains(r.Reason, "does not exist: NRI is not enabled in the container runtime") {
		t.Errorf("report %+v: want enabled, not connected, the socket missing", r)
	}
	if n := strings.Count(logs.String(), "NRI not available"); n != 1 {
		t.Errorf("%d warnings about NRI not available, want 1:\n%s", n, logs)
	}
	if v := testutil.ToFloat64(p.connected); v != 0 {
		t.Errorf("kube_rdma_nri_connected = %v, want 0", v)
	}
}

// proxy stands between the plugin and the runtime side of NRI, so a test
// can end the connections as a runtime's exit does (Adaptation.Stop leaves
// external plugins' connections open).
type proxy struct {
	l  net.Listener
	mu sync.Mutex
	c  []net.Conn
}

func newProxy(t *testing.T, socket, runtime string) *proxy {
	t.Helper()
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	t.Cleanup(func() { _ = l.Close(); p.cut() })
	go func() {
		for {
			a, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("unix", runtime)
			if err != nil {
				_ = a.Close()
				continue
			}
			p.mu.Lock()
			p.c = append(p.c, a, b)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(a, b); _ = a.Close() }()
			go func() { _, _ = io.Copy(b, a); _ = b.Close() }()
		}
	}()
	return p
}

// cut closes every proxied connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.c {
		_ = c.Close()
	}
	p.c = nil
}

func newRuntime(t *testing.T, socket string) *adaptation.Adaptation {
	t.Helper()
	dir := t.TempDir()
	sync := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		return err
	}
	update := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", "v2.2.9", sync, update, adaptation.WithSocketPath(socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")), adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		t.Fatalf("adaptation.New: %v", err)
	}
	if err := r.Start(); err != nil {
		t.Fatalf("start NRI runtime side: %v", err)
	}
	return r
}

// TestPluginAgainstNRIRuntime runs the plugin against the runtime side of
// NRI (pkg/adaptation, what containerd embeds) on a socket: registration,
// CreateContainer for a container with our device and one without, and a
// runtime restart after which the plugin is back and still adjusts.
func TestPluginAgainstNRIRuntime(t *testing.T) {
	dir := t.TempDir()
	socket, runtimeSocket := filepath.Join(dir, "nri.sock"), filepath.Join(dir, "runtime.sock")
	rt := newRuntime(t, runtimeSocket)
	px := newProxy(t, socket, runtimeSocket)
	logs := &syncBuffer{}
	p := startPlugin(t, socket, logs)
	waitFor(t, "registration", func() bool { return p.Report().Connected })
	if v := testutil.ToFloat64(p.connected); v != 1 {
		t.Errorf("kube_rdma_nri_connected = %v, want 1", v)
	}

	create := func(rt *adaptation.Adaptation, ctr *api.Container) []*api.POSIXRlimit {
		t.Helper()
		rsp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: ctr})
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		return rsp.GetAdjust().GetRlimits()
	}
	want := []*api.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: 64 * gi, Soft: 64 * gi}}
	opt := cmpopts.IgnoreUnexported(api.POSIXRlimit{})
	with := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), rdmaCM}, nil)
	// The plugin counts itself connected once the runtime synchronized it;
	// the runtime adds it to the plugins a CreateContainer goes to a moment
	// later, so a CreateContainer in between can reach no plugin. A call
	// that reaches no plugin is not counted by it, so the counts below hold.
	eventually := func(rt *adaptation.Adaptation, what string) {
		t.Helper()
		var diff string
		for range 100 {
			if diff = cmp.Diff(want, create(rt, with), opt); diff == "" {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("%s (-want +got):\n%s", what, diff)
	}
	eventually(rt, "container with uverbs0")
	if got := create(rt, recordedContainer(nil, nil)); len(got) != 0 {
		t.Errorf("container without our devices got rlimits %v", got)
	}
	unlimited := []*api.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: ^uint64(0), Soft: ^uint64(0)}}
	if diff := cmp.Diff(unlimited, create(rt, recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all")), opt); diff != "" {
		t.Errorf("container with roce=all (-want +got):\n%s", diff)
	}

	// The runtime restarts: the plugin notices, reconnects to the new one.
	rt.Stop()
	px.cut()
	waitFor(t, "the plugin to notice the runtime stopped", func() bool { return !p.Report().Connected })
	rt = newRuntime(t, runtimeSocket)
	t.Cleanup(rt.Stop)
	waitFor(t, "re-registration", func() bool { r := p.Report(); return r.Connected && r.Connections == 2 })
	eventually(rt, "after the runtime restarted")
	if r := p.Report(); r.Adjusted != 3 {
		t.Errorf("report %+v: want 3 adjusted", r)
	}
	if v := testutil.ToFloat64(p.decisions.WithLabelValues("untouched")); v != 1 {
		t.Errorf(`kube_rdma_nri_containers_total{decision="untouched"} = %v, want 1`, v)
	}
}

// TestAnnotationIgnoredLoggedOncePerPod: two containers of a pod with a
// raising annotation give one warning; a new pod gives another.
func TestAnnotationIgnoredLoggedOncePerPod(t *testing.T) {
	logs := &syncBuffer{}
	p := New(Config{Source: fakeSource{}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	pod := wirePod(t, recordedPod(map[string]string{AnnotationKey: "1Ti"}))
	ctr := wireContainer(t, recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192)}, nil))
	want := []Rlimit{{Type: RlimitMemlock, Hard: 64 * gi, Soft: 64 * gi}}
	for range 2 {
		got, err := p.create(pod, ctr)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got.Rlimits()); diff != "" {
			t.Fatalf("create (-want +got):\n%s", diff)
		}
	}
	if n := strings.Count(logs.String(), "memlock annotation ignored"); n != 1 {
		t.Errorf("%d warnings for one pod, want 1:\n%s", n, logs)
	}
	p.forget(pod)
	other := pod
	other.ID = "another"
	_, _ = p.create(other, ctr)
	if n := strings.Count(logs.String(), "memlock annotation ignored"); n != 2 {
		t.Errorf("%d warnings for two pods, want 2:\n%s", n, logs)
	}
}

// TestNCCLEnvAgainstNRIRuntime: a container with devices of two pools that
// both set NCCL's variables (hca and roce) gets, through the runtime side of
// NRI, NCCL_IB_HCA and UCX_NET_DEVICES naming the devices of both (each
// pool's Allocate named its own, and the kubelet keeps one); a container
// with devices of one pool gets no variables from the plugin.
func TestNCCLEnvAgainstNRIRuntime(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	rt := newRuntime(t, socket)
	t.Cleanup(rt.Stop)
	logs := &syncBuffer{}
	p := startPlugin(t, socket, logs)
	waitFor(t, "registration", func() bool { return p.Report().Connected })
	create := func(ctr *api.Container) *api.ContainerAdjustment {
		t.Helper()
		rsp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: ctr})
		if err != nil {
			t.Fatalf("CreateContainer: %v", err)
		}
		return rsp.GetAdjust()
	}
	both := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), charDev("/dev/infiniband/uverbs2", 231, 194), rdmaCM}, nil)
	want := []*api.KeyValue{{Key: "NCCL_IB_HCA", Value: "=mlx5_0,mlx5_2"}, {Key: "UCX_NET_DEVICES", Value: "mlx5_0:1,mlx5_2:1"}}
	opt := cmpopts.IgnoreUnexported(api.KeyValue{})
	var diff string
	for range 100 { // the runtime adds a synchronized plugin a moment later
		if diff = cmp.Diff(want, create(both).GetEnv(), opt); diff == "" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if diff != "" {
		t.Errorf("env of a container with devices of hca and roce (-want +got):\n%s", diff)
	}
	one := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), rdmaCM}, nil)
	if adj := create(one); len(adj.GetEnv()) != 0 || len(adj.GetRlimits()) != 1 {
		t.Errorf("container with devices of hca only: env %v, rlimits %v; want no env, the memlock", adj.GetEnv(), adj.GetRlimits())
	}
	if !strings.Contains(logs.String(), "NCCL and UCX variables set for the devices of several NCCL pools") {
		t.Errorf("the adjustment is not logged:\n%s", logs)
	}
}
