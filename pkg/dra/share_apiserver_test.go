package dra_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// sharedPool is a shared pool of frontend dra with three shares a device.
var sharedPool = config.Pool{Name: "roce", Mode: config.Shared, Frontend: config.DRA, Slots: 3}

// startSharedDriver starts a driver against an API server with the given
// feature gates and publishes one NIC in the shared pool.
func startSharedDriver(t *testing.T, gates string, logs *syncBuffer) (kubernetes.Interface, *dra.Driver, discovery.RDMADevice) {
	t.Helper()
	kube, rc := startAPIServerWith(t, gates)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	sockDir := pluginDirs(t)
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: client, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: t.TempDir(), HealthInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	_, node := scan(t, nodesim.LocalNode(0))
	nic := node.RDMADevices[0]
	if err := d.Publish(map[string][]discovery.RDMADevice{sharedPool.Name: {nic}},
		map[string]dra.PoolOptions{sharedPool.Name: {Shares: sharedPool.SlotCount()}}, health(node)); err != nil {
		t.Fatal(err)
	}
	return kube, d, nic
}

func storedSlices(t *testing.T, kube kubernetes.Interface) []*resourceapi.ResourceSlice {
	t.Helper()
	list, err := kube.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{FieldSelector: "spec.driver=" + dra.DriverName})
	if err != nil {
		t.Fatal(err)
	}
	var out []*resourceapi.ResourceSlice
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// classes is a DeviceClassLister of one class, the chart's kind: the
// driver's devices of the pool.
type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, x := range c {
		if x.Name == name {
			return x, nil
		}
	}
	return nil, fmt.Errorf("no device class %s", name)
}

// TestSharedPoolAgainstAPIServer: with DRAConsumableCapacity the API
// server stores the shared device as published; claims asking for one
// share each, created on the API server, are allocated by the scheduler's
// allocator (k8s.io/dynamic-resource-allocation/structured): three fit on
// the 3-share NIC, each with a shareID of its own and 1 share consumed; a
// fourth does not. The pool is not refused.
func TestSharedPoolAgainstAPIServer(t *testing.T) {
	var logs syncBuffer
	kube, d, nic := startSharedDriver(t, "DRADeviceTaints=true,DRAConsumableCapacity=true", &logs)
	ctx := context.Background()
	var stored *resourceapi.Device
	pollFor(t, 10*time.Second, "the shared device stored", func() bool {
		for _, s := range storedSlices(t, kube) {
			for i := range s.Spec.Devices {
				if s.Spec.Devices[i].Name == dra.DeviceName(nic) {
					stored = &s.Spec.Devices[i]
				}
			}
		}
		return stored != nil
	})
	if stored.AllowMultipleAllocations == nil || !*stored.AllowMultipleAllocations {
		t.Errorf("stored allowMultipleAllocations %v", stored.AllowMultipleAllocations)
	}
	if c, ok := stored.Capacity[dra.CapacityShares]; !ok || c.Value.Value() != 3 || c.RequestPolicy == nil || c.RequestPolicy.ValidRange == nil {
		t.Errorf("stored capacity %+v", stored.Capacity)
	}

	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "roce.rdma.kube-rdma.io"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "` + dra.DriverName + `" && device.attributes["kube-rdma.io"].pool == "roce"`}}}}}
	var claims []*resourceapi.ResourceClaim
	for i := range 4 {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("share-%d", i)},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nic",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{dra.CapacityShares: resource.MustParse("1")}}}}}}}}
		created, err := kube.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create claim: %v", err)
		}
		if created.Spec.Devices.Requests[0].Exactly.Capacity == nil {
			t.Fatal("the API server dropped the claim's capacity request")
		}
		claims = append(claims, created)
	}

	features := structured.Features{ConsumableCapacity: true, DeviceTaints: true}
	state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	shares := map[string]bool{}
	for i, c := range claims {
		alloc, err := structured.NewAllocator(ctx, features, state, classes{class}, storedSlices(t, kube), cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{c})
		if err != nil {
			t.Fatalf("allocate claim %d: %v", i, err)
		}
		if i == 3 {
			if len(res) != 0 {
				t.Errorf("a fourth claim on a 3-share NIC was allocated: %+v", res)
			}
			break
		}
		if len(res) != 1 || len(res[0].Devices.Results) != 1 {
			t.Fatalf("claim %d not allocated: %+v", i, res)
		}
		r := res[0].Devices.Results[0]
		if r.Device != dra.DeviceName(nic) || r.ShareID == nil || shares[string(*r.ShareID)] {
			t.Fatalf("claim %d allocated %+v: want a share of its own of %s", i, r, dra.DeviceName(nic))
		}
		if q := r.ConsumedCapacity[dra.CapacityShares]; q.Value() != 1 {
			t.Errorf("claim %d consumed %v, want 1 share", i, r.ConsumedCapacity)
		}
		shares[string(*r.ShareID)] = true
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
	}
	if msg := d.Refusal(sharedPool); msg != "" {
		t.Errorf("refused with the gate on: %s", msg)
	}
}

// TestSharedPoolWithoutTheGate: an API server without DRAConsumableCapacity
// drops allowMultipleAllocations; the driver learns it from its own
// publication and refuses the shared pool with a message naming the gate
// (the agent reports it as a problem and stops serving the pool), and
// says so in its log. An exclusive pool is not refused.
func TestSharedPoolWithoutTheGate(t *testing.T) {
	var logs syncBuffer
	_, d, _ := startSharedDriver(t, "DRADeviceTaints=true", &logs)
	changed := d.Refusals()
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatalf("no refusal within 20 s; log:\n%s", logs.String())
	}
	msg := d.Refusal(sharedPool)
	if !strings.Contains(msg, "DRAConsumableCapacity") || !strings.Contains(msg, `pool "roce"`) {
		t.Errorf("refusal %q does not name the pool and the gate", msg)
	}
	excl := sharedPool
	excl.Mode, excl.Slots = config.Exclusive, 0
	if m := d.Refusal(excl); m != "" {
		t.Errorf("an exclusive pool refused: %s", m)
	}
	if !strings.Contains(logs.String(), "DRAConsumableCapacity") {
		t.Errorf("the log does not name the gate:\n%s", logs.String())
	}
}
