package deviceplugin

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// shortDir is a temporary directory short enough for unix socket paths
// (108 bytes; t.TempDir can be longer).
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func testPool(dir string, cdi *cdiWriter) *poolServer {
	return newPoolServer(config.Pool{Name: "hca", Mode: config.Exclusive}, "rdma.example.com/hca", dir, 1,
		allocContext{}, cdi, slog.New(slog.DiscardHandler), nil)
}

// TestReserveKeepsSocket re-serves right after serving, as the daemon does
// when the kubelet restarts: the first server's listener, closed late by a
// Serve goroutine that starts after stop, must not unlink the new socket.
func TestReserveKeepsSocket(t *testing.T) {
	s := testPool(shortDir(t), nil)
	defer s.stop()
	for i := range 200 {
		if err := s.serve(true); err != nil {
			t.Fatal(err)
		}
		if !s.serving() {
			t.Fatalf("serve %d: socket %s gone", i, s.socketPath())
		}
	}
}

// TestSupersededPoolLeavesPath plays the two pods of a DaemonSet update with
// surge, step by step: the old pod's pool does not take its path back when
// the new pod removes it (before its bind) or replaces it, never registers
// again once superseded, not even after a kubelet restart, and its stop
// leaves the new pod's socket and CDI spec; a kubelet restart makes the new
// pod serve again and register.
func TestSupersededPoolLeavesPath(t *testing.T) {
	dir := shortDir(t)
	k, err := kubeletstub.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	cdi := &cdiWriter{dir: t.TempDir(), devRoot: t.TempDir()}
	members := []discovery.RDMADevice{{Name: "mlx5_0", PCIAddress: "0000:18:00.0", NUMANode: -1, CharDevices: []string{"/dev/infiniband/uverbs0"}}}
	ctx := context.Background()
	regs := func(want int, when string) {
		t.Helper()
		if got := len(k.Registrations()); got != want {
			t.Fatalf("%s: %d registrations, want %d", when, got, want)
		}
	}

	old := testPool(dir, cdi)
	old.setMembers(members)
	if err := old.serve(true); err != nil {
		t.Fatal(err)
	}
	oldReg, err := old.step(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	regs(1, "old pod started")
	select {
	case <-old.waitRegistered():
	default:
		t.Error("old pod registered, yet waitRegistered is open")
	}

	// The new pod removes the path and has not bound it yet: the old pod
	// must not serve it again (the kubelet did not restart).
	if err := os.Remove(old.socketPath()); err != nil {
		t.Fatal(err)
	}
	if oldReg, err = old.step(ctx, oldReg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(old.socketPath()); !os.IsNotExist(err) {
		t.Fatalf("old pod served its removed socket again without a kubelet restart: %v", err)
	}
	regs(1, "socket removed")

	next := testPool(dir, cdi)
	next.setMembers(members)
	if err := next.serve(true); err != nil {
		t.Fatal(err)
	}
	nextReg, err := next.step(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	regs(2, "new pod started")
	if oldReg, err = old.step(ctx, oldReg); err != nil {
		t.Fatal(err)
	}
	if !old.isSuperseded() || old.serving() || !next.serving() {
		t.Fatalf("after the new pod bound the path: old superseded %t serving %t, new serving %t, want true false true",
			old.isSuperseded(), old.serving(), next.serving())
	}

	// A kubelet restart removes every socket: the new pod serves again and
	// registers, the superseded one does neither.
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := old.step(ctx, oldReg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(old.socketPath()); !os.IsNotExist(err) {
		t.Fatalf("superseded pool served again after a kubelet restart: %v", err)
	}
	regs(2, "kubelet restarted, before the new pod's step")
	if nextReg, err = next.step(ctx, nextReg); err != nil {
		t.Fatal(err)
	}
	regs(3, "kubelet restarted")
	if !next.serving() {
		t.Fatal("new pod does not serve its socket after the kubelet restart")
	}
	if _, err := next.step(ctx, nextReg); err != nil {
		t.Fatal(err)
	}
	regs(3, "a second step with the same kubelet")

	// The old pod's stop leaves the new pod's socket and spec.
	sock, err := os.Lstat(next.socketPath())
	if err != nil {
		t.Fatal(err)
	}
	spec := cdi.path("hca")
	old.setMembers(nil) // a superseded pool writes no spec
	old.close(true)
	if fi, err := os.Lstat(next.socketPath()); err != nil || !os.SameFile(fi, sock) {
		t.Errorf("after the old pod stopped: socket %v, want the new pod's", err)
	}
	if b, err := os.ReadFile(spec); err != nil || !strings.Contains(string(b), "0000:18:00.0") {
		t.Errorf("after the old pod stopped: CDI spec %q, %v: want the new pod's, with its device", b, err)
	}
	next.close(true)
	for _, p := range []string{next.socketPath(), spec} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("after the new pod stopped: %v, want %s removed", err, p)
		}
	}
}

// TestDroppedStreamReregisters: when the kubelet ends the ListAndWatch
// stream of the pool's latest registration while it runs on (what kubelets
// without kubernetes/kubernetes#135437 do to the new pod when the old pod
// of an update with surge stops, kubernetes/kubernetes#121994), the pool
// registers again. The stand-in drops a plugin's stream when another
// registers its resource.
func TestDroppedStreamReregisters(t *testing.T) {
	dir := shortDir(t)
	k, err := kubeletstub.Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := testPool(dir, nil)
	p.start(ctx)
	defer p.close(false)
	<-p.waitRegistered()
	wait := func(what string, cond func([]string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var eps []string
			for _, r := range k.Registrations() {
				eps = append(eps, r.Endpoint)
			}
			if cond(eps) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: registrations %q", what, eps)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("first registration", func(eps []string) bool { return len(eps) == 1 })
	// Its ListAndWatch stream open (the stand-in has its first list): a registration of
	// another plugin before that replaces a stream never opened, which ends nothing (a
	// -race run under load once got there first).
	deadline := time.Now().Add(5 * time.Second)
	for _, ok := k.Devices(p.resource); !ok; _, ok = k.Devices(p.resource) {
		if time.Now().After(deadline) {
			t.Fatal("the stand-in kubelet has no list of the pool's devices: its stream did not open")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Another plugin takes the resource: the stand-in drops the pool's stream.
	other := newPoolServer(config.Pool{Name: "other", Mode: config.Exclusive}, p.resource, dir, 1,
		allocContext{}, nil, slog.New(slog.DiscardHandler), nil)
	if err := other.serve(true); err != nil {
		t.Fatal(err)
	}
	defer other.stop()
	if _, err := other.step(ctx, ""); err != nil {
		t.Fatal(err)
	}
	want := []string{SocketName("hca"), SocketName("other"), SocketName("hca")}
	wait("the pool registered again", func(eps []string) bool { return slices.Equal(eps, want) })
	// Once: the stream dropped was the latest registration's only.
	time.Sleep(3 * retryFirst)
	wait("no registration more", func(eps []string) bool { return slices.Equal(eps, want) })
}

// TestClosedPoolWritesNoSpec: an Allocate still in flight when its pool
// closes (the daemon stopping) must not write the spec close removed: it
// would stay on the node after the daemon is gone.
func TestClosedPoolWritesNoSpec(t *testing.T) {
	dir := shortDir(t)
	cdi := &cdiWriter{dir: dir, devRoot: dir}
	s := testPool(dir, cdi)
	s.setMembers([]discovery.RDMADevice{{Name: "mlx5_0", PCIAddress: "0000:18:00.0", CharDevices: []string{"/dev/infiniband/uverbs0"}}})
	if _, err := os.Stat(cdi.path("hca")); err != nil {
		t.Fatalf("spec of the members: %v", err)
	}
	s.close(true)
	if _, err := os.Stat(cdi.path("hca")); !os.IsNotExist(err) {
		t.Fatalf("spec after close: %v, want it gone", err)
	}
	if changed, err := s.writeSpec(); changed || err != nil {
		t.Fatalf("writeSpec after close: changed %v, err %v; want neither", changed, err)
	}
	if _, err := os.Stat(cdi.path("hca")); !os.IsNotExist(err) {
		t.Fatalf("spec after close and writeSpec: %v, want it gone", err)
	}
}

// TestCDISpecLeavesOutDevicesWithoutNodes: a member without device nodes
// (its uverbs not there yet) is not in the pool's spec, which the runtime
// would refuse, and every spec of the directory with it; the others are.
func TestCDISpecLeavesOutDevicesWithoutNodes(t *testing.T) {
	w := cdiWriter{dir: t.TempDir(), devRoot: t.TempDir()}
	members := []discovery.RDMADevice{
		{Name: "mlx5_0", PCIAddress: "0000:18:00.0", CharDevices: []string{"/dev/infiniband/uverbs0"}},
		{Name: "mlx5_1", PCIAddress: "0000:19:00.0"},
	}
	for _, mode := range []config.Mode{config.Exclusive, config.Shared} {
		if _, err := w.write(config.Pool{Name: "hca", Mode: mode}, "rdma.example.com/hca", members); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		data, err := os.ReadFile(w.path("hca"))
		if err != nil {
			t.Fatal(err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range spec.Devices {
			names = append(names, d.Name)
		}
		want := []string{"0000:18:00.0"}
		if mode == config.Shared {
			want = []string{cdiSharedDevice}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s: spec devices %v, want %v", mode, names, want)
		}
	}
	// No member with nodes: no spec at all.
	if _, err := w.write(config.Pool{Name: "hca", Mode: config.Exclusive}, "rdma.example.com/hca", members[1:]); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.path("hca")); !os.IsNotExist(err) {
		t.Errorf("spec of a pool whose members have no nodes: %v, want none", err)
	}
}

// TestSharedSlotsHealth: a shared pool's slots are Healthy while one device
// of the set is (one down port of many takes no slot), Unhealthy when none
// is; every slot stands for the whole set.
func TestSharedSlotsHealth(t *testing.T) {
	pool := config.Pool{Name: "roce", Mode: config.Shared, Slots: 3}
	members := []discovery.RDMADevice{{Name: "mlx5_2", NUMANode: 0}, {Name: "mlx5_3", NUMANode: 1}}
	for _, tc := range []struct {
		name   string
		health map[string]bool
		want   string
	}{
		{"both up", map[string]bool{"mlx5_2": true, "mlx5_3": true}, pluginapi.Healthy},
		{"one port down", map[string]bool{"mlx5_2": true}, pluginapi.Healthy},
		{"both down", map[string]bool{}, pluginapi.Unhealthy},
	} {
		snap := buildSnapshot(pool, members, tc.health)
		if len(snap.devices) != 3 {
			t.Fatalf("%s: %d slots, want 3", tc.name, len(snap.devices))
		}
		for _, d := range snap.devices {
			if d.Health != tc.want {
				t.Errorf("%s: slot %s %s, want %s", tc.name, d.ID, d.Health, tc.want)
			}
			if got := snap.byID[d.ID]; len(got) != 2 {
				t.Errorf("%s: slot %s stands for %d devices, want the set of 2", tc.name, d.ID, len(got))
			}
		}
	}
}

// TestGPUAlignedSpec: a gpuAligned pool's spec has one device, "all", of
// every member's device nodes, the spec's memlock hook, and (fail closed)
// a netdev hook that a record of the pool's binding satisfies (--bound):
// its slots name no NIC, so its containers get their limit and its check
// from the runtime without NRI, as the chained pool's do.
func TestGPUAlignedSpec(t *testing.T) {
	w := cdiWriter{dir: t.TempDir(), devRoot: t.TempDir(), hook: "/hooks/kube-rdma-hook-0",
		failClosed: &FailClosed{StateDir: "/var/lib/cni/kube-rdma"}}
	members := []discovery.RDMADevice{
		{Name: "mlx5_0", PCIAddress: "0000:18:00.0", CharDevices: []string{"/dev/infiniband/uverbs0"}},
		{Name: "mlx5_1", PCIAddress: "0000:19:00.0", CharDevices: []string{"/dev/infiniband/uverbs1"}},
	}
	pool := config.Pool{Name: "gpu-nics", Mode: config.Exclusive, Binding: config.GPUAligned}
	if _, err := w.write(pool, "rdma.example.com/gpu-nics", members); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(w.path("gpu-nics"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Devices) != 1 || spec.Devices[0].Name != cdiSharedDevice {
		t.Fatalf("devices %+v, want one named %q", spec.Devices, cdiSharedDevice)
	}
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if !slices.Equal(nodes, []string{"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"}) {
		t.Errorf("device nodes %v, want every member's", nodes)
	}
	if hs := spec.ContainerEdits.Hooks; len(hs) != 1 || !slices.Contains(hs[0].Args, "memlock-hook") {
		t.Errorf("spec hooks %+v, want the memlock hook", hs)
	}
	hs := spec.Devices[0].ContainerEdits.Hooks
	if len(hs) != 1 || !slices.Contains(hs[0].Args, "--bound") || !slices.Contains(hs[0].Args, "gpuAligned") ||
		!slices.Contains(hs[0].Args, "mlx5_0@0000:18:00.0,mlx5_1@0000:19:00.0") {
		t.Errorf("device hooks %+v, want the netdev hook of the pool's binding (--bound) naming both members", hs)
	}
}
