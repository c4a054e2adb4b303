package dra_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// startAPIServer starts etcd and a kube-apiserver with device taints on
// (DRADeviceTaints, alpha in 1.34), or skips when their binaries are absent.
func startAPIServer(t *testing.T) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	return startAPIServerWith(t, "DRADeviceTaints=true")
}

func startAPIServerWith(t *testing.T, gates string) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	kube, cfg, _ := startAPIServerEnv(t, gates)
	return kube, cfg
}

func startAPIServerEnv(t *testing.T, gates string, flags ...string) (kubernetes.Interface, *rest.Config, *envtest.Environment) {
	t.Helper()
	assets := apiserverassets.Dir(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if gates != "" {
		env.ControlPlane.GetAPIServer().Configure().Append("feature-gates", gates)
	}
	// flags: more of the API server's, "name=value".
	for _, f := range flags {
		k, v, _ := strings.Cut(f, "=")
		env.ControlPlane.GetAPIServer().Configure().Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, cfg, env
}

// chartUser binds the chart's DRA rules (deploy/helm/kube-rdma/files/dra-rules.yaml) to a
// ServiceAccount, as the chart does, and returns a config authenticated as it.
func chartUser(t *testing.T, env *envtest.Environment, kube kubernetes.Interface) *rest.Config {
	t.Helper()
	data, err := os.ReadFile("../../deploy/helm/kube-rdma/files/dra-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("chart rules: %v", err)
	}
	ctx := context.Background()
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-rdma"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-rdma", Name: "kube-rdma"}}}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "system:serviceaccount:kube-rdma:kube-rdma", Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		t.Fatalf("add user: %v", err)
	}
	return u.Config()
}

// pluginDirs is a directory for the driver's plugin and registry directories
// (registry/ made, as the kubelet has it), removed at the end. Unix socket
// paths are limited to 108 bytes, and t.TempDir can be longer.
func pluginDirs(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dra")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "registry"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func pollFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDriverAgainstAPIServer runs the front end on the real kubeletplugin
// helper against a real API server: slices published, tainted and
// untainted with the ports, the taint's time kept across republishes,
// health reports following, and a claim prepared and unprepared twice
// through the helper's gRPC service, as the kubelet calls it.
func TestDriverAgainstAPIServer(t *testing.T) {
	kube, _, env := startAPIServerEnv(t, "DRADeviceTaints=true")
	// The driver gets a client like the daemon's, authenticated as the
	// chart's ServiceAccount with the chart's rules and nothing else.
	driverClient, err := kubernetes.NewForConfig(chartUser(t, env, kube))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sockDir := pluginDirs(t)
	devRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(devRoot, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	cdiDir := t.TempDir()
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: driverClient, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: cdiDir, DevRoot: devRoot, HealthInterval: time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)

	// What the kubelet's plugin watcher finds in its registry directory.
	regs, err := filepath.Glob(filepath.Join(sockDir, "registry", "*.sock"))
	if err != nil || len(regs) != 1 {
		t.Fatalf("registration sockets %v, %v", regs, err)
	}
	regConn, err := grpc.NewClient("unix://"+regs[0], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = regConn.Close() })
	info, err := registerapi.NewRegistrationClient(regConn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != "DRAPlugin" || info.Name != dra.DriverName || info.Endpoint != filepath.Join(sockDir, "plugin", "dra.sock") {
		t.Errorf("registration info %+v", info)
	}

	_, node := scan(t, nodesim.LocalNode(1))
	healthy := health(node)
	pools := map[string][]discovery.RDMADevice{"nics": node.RDMADevices}
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	published := func() map[string]resourceapi.Device {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]resourceapi.Device{}
		for _, s := range list.Items {
			if s.Spec.Pool.Name != "node-a/nics" || s.Spec.NodeName == nil || *s.Spec.NodeName != "node-a" {
				t.Fatalf("slice %s: pool %q node %v", s.Name, s.Spec.Pool.Name, s.Spec.NodeName)
			}
			for _, dev := range s.Spec.Devices {
				out[dev.Name] = dev
			}
		}
		return out
	}
	mlx51 := dra.DeviceName(node.RDMADevices[1])
	pollFor(t, 10*time.Second, "slices published", func() bool { return len(published()) == len(node.RDMADevices) })
	got := published()[dra.DeviceName(node.RDMADevices[0])]
	if sw := got.Attributes[dra.AttrPCIeSwitch].StringValue; sw == nil || *sw != "0000:16:00.0" {
		t.Errorf("stored pcieSwitch %v", sw)
	}
	if root := got.Attributes["resource.kubernetes.io/pcieRoot"].StringValue; root == nil || *root != "pci0000:15" {
		t.Errorf("stored pcieRoot %v", root)
	}

	reports := make(chan kubeletplugin.DeviceHealthReport, 10)
	go func() { _ = d.WatchHealthStatus(ctx, reports) }()
	unhealthy := func(r kubeletplugin.DeviceHealthReport) []string {
		var out []string
		for _, h := range r.Devices {
			if h.Health != kubeletplugin.HealthStatusHealthy {
				out = append(out, h.DeviceName)
			}
		}
		return out
	}
	if r := <-reports; len(r.Devices) != len(node.RDMADevices) || len(unhealthy(r)) != 0 {
		t.Errorf("first health report: %d devices, unhealthy %v", len(r.Devices), unhealthy(r))
	}

	// mlx5_1's port goes down: tainted in the API, unhealthy to the kubelet.
	healthy["mlx5_1"] = false
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "taint stored", func() bool { return len(published()[mlx51].Taints) == 1 })
	taint := published()[mlx51].Taints[0]
	if taint.Key != dra.TaintPortDown || taint.Effect != resourceapi.DeviceTaintEffectNoSchedule || taint.TimeAdded == nil {
		t.Errorf("stored taint %+v", taint)
	}
	if r := <-reports; len(unhealthy(r)) != 1 || unhealthy(r)[0] != mlx51 {
		t.Errorf("health report after port down: unhealthy %v", unhealthy(r))
	}
	// A republish while it stays down (another device changing forces an
	// update of the slice) keeps the taint's time.
	time.Sleep(1100 * time.Millisecond) // TimeAdded has a resolution of one second
	healthy["mlx5_2"] = false
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	mlx52 := dra.DeviceName(node.RDMADevices[2])
	pollFor(t, 10*time.Second, "second taint stored", func() bool { return len(published()[mlx52].Taints) == 1 })
	if again := published()[mlx51].Taints; len(again) != 1 || !again[0].TimeAdded.Equal(taint.TimeAdded) {
		t.Errorf("taint after republish %+v, was %+v", again, taint)
	}
	healthy["mlx5_1"], healthy["mlx5_2"] = true, true
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "taints removed", func() bool {
		p := published()
		return len(p[mlx51].Taints) == 0 && len(p[mlx52].Taints) == 0
	})

	// A port going down just after another publication (the untaint above
	// opened a pacing window) is tainted at once, by the pacer's urgent
	// call, not at the window's end 2 s later: the rxe-cluster e2e saw a
	// taint wait out the window a netdev or GID change had opened.
	healthy["mlx5_1"] = false
	start := time.Now()
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "taint within a pacing window", func() bool { return len(published()[mlx51].Taints) == 1 })
	if took, limit := time.Since(start), dra.DefaultPublishInterval/2; took > limit {
		t.Errorf("mlx5_1 tainted %s after its port went down inside a pacing window, want at once (within %s)", took.Round(time.Millisecond), limit)
	}
	healthy["mlx5_1"] = true
	if err := d.Publish(pools, nil, healthy); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "taint removed again", func() bool { return len(published()[mlx51].Taints) == 0 })

	// A claim allocated mlx5_0, prepared through the gRPC service.
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c1", Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "rdma.kube-rdma.io"}}}}}}
	claim, err = kube.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mlx50 := dra.DeviceName(node.RDMADevices[0])
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "nic", Driver: dra.DriverName, Pool: "node-a/nics", Device: mlx50}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "0d6c1a35-0000-4000-8000-0000000000a1"}}
	if claim, err = kube.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(sockDir, "plugin", "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := drapb.NewDRAPluginClient(conn)
	ref := &drapb.Claim{Namespace: "default", Name: "c1", Uid: string(claim.UID)}
	spec := filepath.Join(cdiDir, "kube-rdma-claim-"+string(claim.UID)+".json")
	for i := range 2 {
		resp, err := c.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref}})
		if err != nil {
			t.Fatalf("prepare #%d: %v", i+1, err)
		}
		r := resp.Claims[string(claim.UID)]
		if r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != mlx50 ||
			len(r.Devices[0].CdiDeviceIds) != 1 || r.Devices[0].CdiDeviceIds[0] != dra.CDIKind+"="+string(claim.UID)+"-nic" {
			t.Fatalf("prepare #%d: %+v", i+1, r)
		}
		if _, err := os.Stat(spec); err != nil {
			t.Errorf("prepare #%d: %v", i+1, err)
		}
		// What the CNI plugin reads: the pod and the RDMA device.
		recs, _, err := claimrecord.ReadAll(dra.ClaimsDir(filepath.Join(sockDir, "plugin")))
		if err != nil || len(recs) != 1 || !recs[0].ForPod("0d6c1a35-0000-4000-8000-0000000000a1") ||
			len(recs[0].Devices) != 1 || recs[0].Devices[0].RDMA != node.RDMADevices[0].Name {
			t.Errorf("prepare #%d: claim records %+v, %v", i+1, recs, err)
		}
	}
	unknown := &drapb.Claim{Namespace: "default", Name: "gone", Uid: "0d6c1a35-0000-4000-8000-000000000000"}
	for i := range 2 {
		resp, err := c.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref, unknown}})
		if err != nil {
			t.Fatalf("unprepare #%d: %v", i+1, err)
		}
		for uid, r := range resp.Claims {
			if r.Error != "" {
				t.Errorf("unprepare #%d of %s: %s", i+1, uid, r.Error)
			}
		}
		if _, err := os.Stat(spec); !os.IsNotExist(err) {
			t.Errorf("unprepare #%d left the spec: %v", i+1, err)
		}
	}
}

type sharedNetns struct{}

func (sharedNetns) NetnsMode() (rdma.NetnsMode, error) { return rdma.NetnsShared, nil }

// TestDaemonPublishesThroughDRA runs the whole node agent with a dra pool
// against a real API server: the daemon's watcher sees a port go down and
// come back in sysfs, and the stored device gets and loses its taint; a
// hot-unplugged device leaves the slice.
func TestDaemonPublishesThroughDRA(t *testing.T) {
	kube, rc := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sockDir := pluginDirs(t)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: client, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: t.TempDir(), DevRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(drv.Stop)
	tree, node := scan(t, nodesim.HGX())
	conf := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(conf, []byte("resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := agent.New(agent.Config{ConfigFile: conf, SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, NodeName: "node-a",
		NetnsMode: sharedNetns{}, Events: []agent.EventSource{}, FrontEnds: map[config.Frontend]agent.FrontEnd{config.DRA: drv}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	published := func() map[string]resourceapi.Device {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]resourceapi.Device{}
		for _, s := range list.Items {
			for _, dev := range s.Spec.Devices {
				out[dev.Name] = dev
			}
		}
		return out
	}
	byName := map[string]string{}
	for _, r := range node.RDMADevices {
		byName[r.Name] = dra.DeviceName(r)
	}
	pollFor(t, 10*time.Second, "the 8 InfiniBand NICs published", func() bool { return len(published()) == 8 })
	if _, ok := published()[byName["mlx5_8"]]; ok {
		t.Errorf("a RoCE NIC outside the pool is published")
	}
	if err := tree.SetPortState("mlx5_3", 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "mlx5_3 tainted", func() bool { return len(published()[byName["mlx5_3"]].Taints) == 1 })
	if err := tree.SetPortState("mlx5_3", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "mlx5_3 untainted", func() bool {
		dev, ok := published()[byName["mlx5_3"]]
		return ok && len(dev.Taints) == 0
	})
	if err := tree.RemoveRDMA("mlx5_5"); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "mlx5_5 unpublished", func() bool {
		p := published()
		_, ok := p[byName["mlx5_5"]]
		return !ok && len(p) == 7
	})
	// The pool moves to the device plugin (not run here: refused): its
	// slices go.
	tmp := conf + ".tmp"
	if err := os.WriteFile(tmp, []byte("resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, conf); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "slices deleted", func() bool { return len(published()) == 0 })
}

// syncBuffer is a log sink tests read while the driver writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// TestTaintsWithoutTheFeatureGate: an API server without DRADeviceTaints
// drops the taint; the rest of the slice is stored, the drop is logged, and
// portState still says the device is down.
func TestTaintsWithoutTheFeatureGate(t *testing.T) {
	kube, rc := startAPIServerWith(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sockDir := pluginDirs(t)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: client, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	_, node := scan(t, nodesim.PortDown())
	if err := d.Publish(map[string][]discovery.RDMADevice{"ib": node.RDMADevices}, nil, health(node)); err != nil {
		t.Fatal(err)
	}
	down := dra.DeviceName(node.RDMADevices[1])
	var stored resourceapi.Device
	pollFor(t, 10*time.Second, "slice stored", func() bool {
		list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			for _, dev := range s.Spec.Devices {
				if dev.Name == down {
					stored = dev
					return true
				}
			}
		}
		return false
	})
	if len(stored.Taints) != 0 {
		t.Errorf("taints stored without the gate: %v", stored.Taints)
	}
	if ps := stored.Attributes[dra.AttrPortState].StringValue; ps == nil || *ps != "DOWN" {
		t.Errorf("stored portState %v", ps)
	}
	pollFor(t, 10*time.Second, "the drop logged", func() bool {
		return strings.Contains(logs.String(), "dropped by the apiserver") && strings.Contains(logs.String(), "DRADeviceTaints")
	})
}
