package deviceplugin_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

const roceConfig = `resourcePrefix: rdma.example.com
pools:
- {name: pf, mode: exclusive, nccl: false, selectors: {kinds: [PF]}}
- {name: vf-gpu0, mode: exclusive, selectors: {pfNames: [gpu0rdma0]}}
- {name: sf, mode: exclusive, nccl: false, selectors: {kinds: [SF]}}
- {name: numa1, mode: shared, slots: 3, nccl: false, selectors: {kinds: [PF], pciAddresses: ["0000:95:00.0", "0000:96:00.0"]}}
`

func startRoCE(t *testing.T, cdi bool) *env {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, roceConfig)
	e := start(t, nodesim.RoCESRIOV(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		if cdi {
			c.CDIDir = filepath.Join(t.TempDir(), "cdi")
		}
	})
	e.WaitFor(t, 5*time.Second, "four pools listed", func(k *kubeletstub.Kubelet) bool {
		for _, r := range []string{"pf", "vf-gpu0", "sf", "numa1"} {
			if _, ok := k.Devices("rdma.example.com/" + r); !ok {
				return false
			}
		}
		return true
	})
	return e
}

func spec(e *env, ctr ...string) []*pluginapi.DeviceSpec {
	var out []*pluginapi.DeviceSpec
	for _, c := range ctr {
		out = append(out, &pluginapi.DeviceSpec{ContainerPath: c, HostPath: c, Permissions: "rw"})
	}
	return out
}

func TestListPerMode(t *testing.T) {
	e := startRoCE(t, false)
	numa0, numa1 := int64(0), int64(1)
	want := map[string][]*pluginapi.Device{
		"pf": {dev("0000:15:00.0", numa0), dev("0000:16:00.0", numa0), dev("0000:35:00.0", numa0), dev("0000:36:00.0", numa0),
			dev("0000:95:00.0", numa1), dev("0000:96:00.0", numa1), dev("0000:b5:00.0", numa1), dev("0000:b6:00.0", numa1)},
		"vf-gpu0": {dev("0000:15:00.2", numa0), dev("0000:15:00.3", numa0)},
		"sf":      {dev("mlx5_core.sf.2", numa0)},
		"numa1":   {dev("numa1-0", numa1), dev("numa1-1", numa1), dev("numa1-2", numa1)},
	}
	for pool, w := range want {
		got, _ := e.Kubelet.Devices("rdma.example.com/" + pool)
		if diff := cmp.Diff(w, got, protocmp.Transform()); diff != "" {
			t.Errorf("pool %s (-want +got)\n%s", pool, diff)
		}
	}
}

func TestAllocate(t *testing.T) {
	e := startRoCE(t, false)
	tests := []struct {
		name string
		pool string
		ids  []string
		want *pluginapi.ContainerAllocateResponse
	}{
		// Only vf-gpu0 sets NCCL's variables: the others name their devices
		// in KUBE_RDMA_<POOL>_* only, so a container with several pools has
		// one NCCL_IB_HCA, the NCCL pool's, whatever order the kubelet
		// merges the responses in.
		{"two PFs of a pool that is not NCCL's", "pf", []string{"0000:16:00.0", "0000:15:00.0"}, &pluginapi.ContainerAllocateResponse{
			Devices: spec(e, "/dev/infiniband/uverbs0", "/dev/infiniband/umad0", "/dev/infiniband/issm0",
				"/dev/infiniband/uverbs1", "/dev/infiniband/umad1", "/dev/infiniband/issm1", "/dev/infiniband/rdma_cm"),
			Envs: map[string]string{
				"KUBE_RDMA_PF_RDMA_DEVICES": "mlx5_0,mlx5_1", "KUBE_RDMA_PF_PCI_ADDRESSES": "0000:15:00.0,0000:16:00.0",
			}}},
		{"VF without IPv4: first RoCE v2 index", "vf-gpu0", []string{"0000:15:00.3"}, &pluginapi.ContainerAllocateResponse{
			Devices: spec(e, "/dev/infiniband/uverbs9", "/dev/infiniband/umad9", "/dev/infiniband/issm9", "/dev/infiniband/rdma_cm"),
			Envs: map[string]string{
				"KUBE_RDMA_VF_GPU0_RDMA_DEVICES": "mlx5_9", "KUBE_RDMA_VF_GPU0_PCI_ADDRESSES": "0000:15:00.3",
				"NCCL_IB_HCA": "=mlx5_9", "NCCL_IB_GID_INDEX": "1", "UCX_IB_GID_INDEX": "1", "UCX_NET_DEVICES": "mlx5_9:1",
			}}},
		{"SF of a pool that is not NCCL's", "sf", []string{"mlx5_core.sf.2"}, &pluginapi.ContainerAllocateResponse{
			Devices: spec(e, "/dev/infiniband/uverbs12", "/dev/infiniband/umad12", "/dev/infiniband/issm12", "/dev/infiniband/rdma_cm"),
			Envs: map[string]string{
				"KUBE_RDMA_SF_RDMA_DEVICES": "mlx5_12", "KUBE_RDMA_SF_PCI_ADDRESSES": "0000:35:00.0",
			}}},
		{"shared slot gets the whole set, no NCCL variables", "numa1", []string{"numa1-2"}, &pluginapi.ContainerAllocateResponse{
			Devices: spec(e, "/dev/infiniband/uverbs4", "/dev/infiniband/umad4", "/dev/infiniband/issm4",
				"/dev/infiniband/uverbs5", "/dev/infiniband/umad5", "/dev/infiniband/issm5", "/dev/infiniband/rdma_cm"),
			Envs: map[string]string{
				"KUBE_RDMA_NUMA1_RDMA_DEVICES": "mlx5_4,mlx5_5", "KUBE_RDMA_NUMA1_PCI_ADDRESSES": "0000:95:00.0,0000:96:00.0",
			}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := e.Kubelet.Allocate(context.Background(), "rdma.example.com/"+tt.pool, tt.ids)
			if err != nil {
				t.Fatal(err)
			}
			want := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{tt.want}}
			if diff := cmp.Diff(want, resp, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestAllocateErrors(t *testing.T) {
	e := startRoCE(t, false)
	tests := []struct {
		name string
		pool string
		ids  [][]string
	}{
		{"unknown id", "pf", [][]string{{"0000:99:00.0"}}},
		{"id of another pool", "pf", [][]string{{"0000:15:00.2"}}},
		{"second container unknown", "pf", [][]string{{"0000:15:00.0"}, {"bogus"}}},
		{"unknown slot", "numa1", [][]string{{"numa1-3"}}},
		{"empty container request", "pf", [][]string{{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Kubelet.Allocate(context.Background(), "rdma.example.com/"+tt.pool, tt.ids...)
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("got %v, want InvalidArgument", err)
			}
		})
	}
	body := scrape(t, e.Agent, "/metrics")
	if got, want := metricLine(body, `kube_rdma_device_plugin_allocations_total{pool="pf",result="failure"}`), `kube_rdma_device_plugin_allocations_total{pool="pf",result="failure"} 4`; got != want {
		t.Errorf("metric: got %q, want %q", got, want)
	}
}

func TestAllocateCDI(t *testing.T) {
	e := startRoCE(t, true)
	resp, err := e.Kubelet.Allocate(context.Background(), "rdma.example.com/pf", []string{"0000:95:00.0"})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	want := []*pluginapi.CDIDevice{{Name: "rdma.example.com/pf=0000:95:00.0"}}
	if diff := cmp.Diff(want, c.CdiDevices, protocmp.Transform()); diff != "" {
		t.Errorf("CDI devices (-want +got)\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"cdi.k8s.io/kube-rdma_pf": "rdma.example.com/pf=0000:95:00.0"}, c.Annotations); diff != "" {
		t.Errorf("annotations (-want +got)\n%s", diff)
	}
	resp, err = e.Kubelet.Allocate(context.Background(), "rdma.example.com/numa1", []string{"numa1-0"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]*pluginapi.CDIDevice{{Name: "rdma.example.com/numa1=all"}}, resp.ContainerResponses[0].CdiDevices, protocmp.Transform()); diff != "" {
		t.Errorf("shared CDI devices (-want +got)\n%s", diff)
	}

	data, err := os.ReadFile(filepath.Join(e.Cfg.CDIDir, "kube-rdma-vf-gpu0.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	node := func(p string) *cdispec.DeviceNode {
		return &cdispec.DeviceNode{Path: p, HostPath: p, Permissions: "rw"}
	}
	wantSpec := cdispec.Spec{
		Version: spec.Version, Kind: "rdma.example.com/vf-gpu0",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{node("/dev/infiniband/rdma_cm")}},
		Devices: []cdispec.Device{
			{Name: "0000:15:00.2", ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{node("/dev/infiniband/uverbs8"), node("/dev/infiniband/umad8"), node("/dev/infiniband/issm8")}}},
			{Name: "0000:15:00.3", ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: []*cdispec.DeviceNode{node("/dev/infiniband/uverbs9"), node("/dev/infiniband/umad9"), node("/dev/infiniband/issm9")}}},
		},
	}
	// No environment in the spec: the runtime applies CDI edits per device, so a
	// container with two devices would get the last one's NCCL_IB_HCA (the
	// Allocate response names both).
	if diff := cmp.Diff(wantSpec, spec); diff != "" {
		t.Errorf("CDI spec (-want +got)\n%s", diff)
	}
	if err := cdispec.ValidateVersion(&spec); err != nil {
		t.Errorf("CDI spec version %q: %v", spec.Version, err)
	}
}

func TestPreferredAllocation(t *testing.T) {
	e := startRoCE(t, false)
	all := ids(mustDevices(t, e.Kubelet, "rdma.example.com/pf"))
	tests := []struct {
		name      string
		available []string
		must      []string
		size      int
		want      []string
	}{
		{"two from all: one switch", all, nil, 2, []string{"0000:15:00.0", "0000:16:00.0"}},
		{"switch pair beats lower address", []string{"0000:15:00.0", "0000:35:00.0", "0000:36:00.0"}, nil, 2, []string{"0000:35:00.0", "0000:36:00.0"}},
		{"must-include on numa 1", all, []string{"0000:b6:00.0"}, 2, []string{"0000:b5:00.0", "0000:b6:00.0"}},
		{"must-include pulls same root complex before other numa", []string{"0000:15:00.0", "0000:95:00.0", "0000:b5:00.0"}, []string{"0000:b5:00.0"}, 2,
			[]string{"0000:95:00.0", "0000:b5:00.0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := e.Kubelet.GetPreferredAllocation(context.Background(), "rdma.example.com/pf", tt.available, tt.must, tt.size)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	if _, err := e.Kubelet.GetPreferredAllocation(context.Background(), "rdma.example.com/pf", []string{"nope"}, nil, 1); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown device: got %v, want InvalidArgument", err)
	}
}

func mustDevices(t *testing.T, k *kubeletstub.Kubelet, resource string) []*pluginapi.Device {
	t.Helper()
	d, ok := k.Devices(resource)
	if !ok {
		t.Fatalf("%s not listed", resource)
	}
	return d
}
