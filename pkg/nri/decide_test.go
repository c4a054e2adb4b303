package nri

import (
	"errors"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// The requests below are shaped as containerd 2.2 sends them to an NRI
// plugin for a Kubernetes pod: the sandbox with the pod's annotations, the
// container with the kubelet's annotations (the device plugin's CDI
// annotation among them), its CDI devices and, in its Linux device list, the
// device plugin's DeviceSpecs resolved to the host's type/major/minor.

const gi = uint64(1) << 30

func recordedPod(annotations map[string]string) *api.PodSandbox {
	a := map[string]string{
		"io.kubernetes.cri.container-type": "sandbox",
		"io.kubernetes.cri.sandbox-name":   "trainer-0",
		"io.kubernetes.cri.sandbox-uid":    "6f0c8a4e-2b1d-4c55-9a8e-1f2d3c4b5a69",
		"kubernetes.io/config.source":      "api",
	}
	for k, v := range annotations {
		a[k] = v
	}
	return &api.PodSandbox{
		Id: "0c1e9f6d5b", Name: "trainer-0", Uid: "6f0c8a4e-2b1d-4c55-9a8e-1f2d3c4b5a69", Namespace: "ml",
		Labels:      map[string]string{"app": "trainer"},
		Annotations: a,
		Linux:       &api.LinuxPodSandbox{CgroupsPath: "kubepods-besteffort-pod6f0c8a4e.slice:cri-containerd:0c1e9f6d5b"},
	}
}

func charDev(p string, major, minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: p, Type: "c", Major: major, Minor: minor,
		FileMode: &api.OptionalFileMode{Value: 0o20666}, Uid: &api.OptionalUInt32{}, Gid: &api.OptionalUInt32{}}
}

// recordedContainer: name and image are those of an RDMA workload in every
// case, so a decision that looked at them would show.
func recordedContainer(devs []*api.LinuxDevice, annotations map[string]string, cdi ...string) *api.Container {
	a := map[string]string{
		"io.kubernetes.cri.container-type": "container",
		"io.kubernetes.cri.container-name": "rdma-bench",
		"io.kubernetes.cri.image-name":     "ghcr.io/example/perftest-rdma:latest",
		"io.kubernetes.cri.sandbox-id":     "0c1e9f6d5b",
	}
	for k, v := range annotations {
		a[k] = v
	}
	c := &api.Container{
		Id: "7d2a0b", PodSandboxId: "0c1e9f6d5b", Name: "rdma-bench", Annotations: a,
		Args: []string{"ib_write_bw", "-d", "mlx5_0"},
		Env:  []string{"NCCL_IB_HCA==mlx5_0", "KUBE_RDMA_HCA_RDMA_DEVICES=mlx5_0"},
		Linux: &api.LinuxContainer{
			Devices:     devs,
			CgroupsPath: "kubepods-besteffort-pod6f0c8a4e.slice:cri-containerd:7d2a0b",
		},
		User: &api.User{Uid: 1000, Gid: 1000},
	}
	for _, n := range cdi {
		c.CDIDevices = append(c.CDIDevices, &api.CDIDevice{Name: n})
	}
	return c
}

// testDevices: pool hca (exclusive, default unlimited) has mlx5_0 and
// mlx5_1; pool roce (shared, memlock 64Gi) has mlx5_2; pool small
// (exclusive, memlock 1Gi) has mlx5_3.
func testDevices() Devices {
	return Devices{Pools: []Pool{
		{Name: "hca", Limit: config.MemlockUnlimited,
			Nodes: []DeviceNode{
				{"/dev/infiniband/uverbs0", 231, 192, "mlx5_0"}, {"/dev/infiniband/umad0", 231, 0, "mlx5_0"}, {"/dev/infiniband/issm0", 231, 64, "mlx5_0"},
				{"/dev/infiniband/uverbs1", 231, 193, "mlx5_1"}, {"/dev/infiniband/umad1", 231, 1, "mlx5_1"}, {"/dev/infiniband/issm1", 231, 65, "mlx5_1"},
			},
			CDIDevices: []string{"rdma.kube-rdma.io/hca=0000:18:00.0", "rdma.kube-rdma.io/hca=0000:18:00.1"}},
		{Name: "roce", Limit: 64 * gi,
			Nodes:      []DeviceNode{{"/dev/infiniband/uverbs2", 231, 194, "mlx5_2"}},
			CDIDevices: []string{"rdma.kube-rdma.io/roce=all"}},
		{Name: "small", Limit: gi,
			Nodes: []DeviceNode{{"/dev/infiniband/uverbs3", 0, 0, "mlx5_3"}}}, // major/minor unknown
	},
		// A DRA pool: a claim's CDI spec gives the container its devices' nodes.
		DRAPools: []Pool{{Name: "vf-dra", Limit: 2 * gi, Nodes: []DeviceNode{{"/dev/infiniband/uverbs4", 231, 196, "mlx5_4"}}}},
	}
}

var rdmaCM = charDev("/dev/infiniband/rdma_cm", 10, 58)

func TestDecide(t *testing.T) {
	hcaCDI := map[string]string{"cdi.k8s.io/kube-rdma_hca": "rdma.kube-rdma.io/hca=0000:18:00.0"}
	uverbs0 := []*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), charDev("/dev/infiniband/umad0", 231, 0), rdmaCM}
	tests := []struct {
		name    string
		pod     map[string]string
		ctr     *api.Container
		want    Decision
		ignored error // wraps this, or nil
	}{
		{name: "our device nodes and CDI annotation", ctr: recordedContainer(uverbs0, hcaCDI),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}},
		{name: "device nodes only (CDI off)", ctr: recordedContainer(uverbs0, nil),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}},
		{name: "CDI device only", ctr: recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce"}, PoolLimit: 64 * gi, Limit: 64 * gi}},
		{name: "CDI annotation only", ctr: recordedContainer(nil, hcaCDI),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}},
		{name: "no devices", ctr: recordedContainer(nil, nil)},
		{name: "someone else's devices", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/nvidia0", 195, 0), charDev("/dev/nvidiactl", 195, 255)},
			map[string]string{"cdi.k8s.io/nvidia": "nvidia.com/gpu=0"}, "nvidia.com/gpu=0")},
		{name: "rdma_cm alone names no pool", ctr: recordedContainer([]*api.LinuxDevice{rdmaCM}, nil)},
		{name: "similar path uverbs10", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs10", 231, 202)}, nil)},
		{name: "similar path in another directory", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband2/uverbs0", 231, 192)}, nil)},
		{name: "our path, another host device", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 200)}, nil)},
		{name: "our path, not a char device", ctr: recordedContainer([]*api.LinuxDevice{{Path: "/dev/infiniband/uverbs0", Type: "b", Major: 231, Minor: 192}}, nil)},
		{name: "unclean path of ours", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/./uverbs1", 231, 193)}, nil),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}},
		{name: "major/minor unknown to the daemon: path", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs3", 231, 195)}, nil),
			want: Decision{Pools: []string{"small"}, PoolLimit: gi, Limit: gi}},
		{name: "CDI name of another kind in our annotation key", ctr: recordedContainer(nil, map[string]string{"cdi.k8s.io/kube-rdma_hca": "rdma.kube-rdma.io/hca=0000:99:00.0"})},
		{name: "our CDI name outside a cdi.k8s.io annotation", ctr: recordedContainer(nil, map[string]string{"example.com/devices": "rdma.kube-rdma.io/hca=0000:18:00.0"})},
		{name: "annotation lowers", pod: map[string]string{AnnotationKey: "8Gi"}, ctr: recordedContainer(uverbs0, hcaCDI),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: 8 * gi}},
		{name: "annotation lowers a pool override", pod: map[string]string{AnnotationKey: "2Gi"}, ctr: recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce"}, PoolLimit: 64 * gi, Limit: 2 * gi}},
		{name: "annotation equal to the pool's", pod: map[string]string{AnnotationKey: "64Gi"}, ctr: recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce"}, PoolLimit: 64 * gi, Limit: 64 * gi}},
		{name: "annotation raises: ignored", pod: map[string]string{AnnotationKey: "128Gi"}, ctr: recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce"}, PoolLimit: 64 * gi, Limit: 64 * gi}, ignored: ErrAboveLimit},
		{name: "annotation unlimited above a pool override: ignored", pod: map[string]string{AnnotationKey: "unlimited"}, ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs3", 231, 195)}, nil),
			want: Decision{Pools: []string{"small"}, PoolLimit: gi, Limit: gi}, ignored: ErrAboveLimit},
		{name: "annotation invalid: ignored", pod: map[string]string{AnnotationKey: "lots"}, ctr: recordedContainer(uverbs0, nil),
			want: Decision{Pools: []string{"hca"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}, ignored: ErrBadAnnotation},
		{name: "annotation on a pod without our devices: untouched", pod: map[string]string{AnnotationKey: "8Gi"}, ctr: recordedContainer(nil, nil)},
		{name: "several pools: the highest limit", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs3", 231, 195)}, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce", "small"}, PoolLimit: 64 * gi, Limit: 64 * gi}},
		{name: "several pools with unlimited", ctr: recordedContainer(uverbs0, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"hca", "roce"}, PoolLimit: config.MemlockUnlimited, Limit: config.MemlockUnlimited}},
		{name: "several pools, annotation lowers below both", pod: map[string]string{AnnotationKey: "512Mi"}, ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs3", 231, 195)}, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce", "small"}, PoolLimit: 64 * gi, Limit: 512 << 20}},
		{name: "nil linux section", ctr: &api.Container{Id: "x", Name: "x"}},
		// Before, DRA pools were not in the view: a claim's container got no limit.
		{name: "a DRA claim's device nodes", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs4", 231, 196), rdmaCM}, nil, "kube-rdma.io/claim=5b1c0000-0000-4000-8000-000000000001-nic"),
			want: Decision{Pools: []string{"vf-dra"}, PoolLimit: 2 * gi, Limit: 2 * gi}},
		{name: "a DRA pool and a device plugin pool", ctr: recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs4", 231, 196)}, nil, "rdma.kube-rdma.io/roce=all"),
			want: Decision{Pools: []string{"roce", "vf-dra"}, PoolLimit: 64 * gi, Limit: 64 * gi}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(wirePod(t, recordedPod(tc.pod)), wireContainer(t, tc.ctr), testDevices())
			if !errors.Is(got.AnnotationIgnored, tc.ignored) || (tc.ignored == nil) != (got.AnnotationIgnored == nil) {
				t.Errorf("AnnotationIgnored = %v, want %v", got.AnnotationIgnored, tc.ignored)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Decision{}, "AnnotationIgnored")); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
			adj := got.Rlimits()
			if !tc.want.Adjust() {
				if adj != nil {
					t.Errorf("adjustment %v for a container without our devices", adj)
				}
				return
			}
			want := []Rlimit{{Type: "RLIMIT_MEMLOCK", Hard: tc.want.Limit, Soft: tc.want.Limit}}
			if diff := cmp.Diff(want, adj); diff != "" {
				t.Errorf("adjustment rlimits (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecideIgnoresNameAndImage: the same container with our device and
// without, under names and images that say RDMA or not.
func TestDecideIgnoresNameAndImage(t *testing.T) {
	for _, name := range []string{"rdma", "nginx"} {
		with := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192)}, nil)
		without := recordedContainer(nil, nil)
		for _, c := range []*api.Container{with, without} {
			c.Name = name
			c.Annotations["io.kubernetes.cri.container-name"] = name
			c.Annotations["io.kubernetes.cri.image-name"] = "docker.io/library/" + name + ":latest"
		}
		if !Decide(wirePod(t, recordedPod(nil)), wireContainer(t, with), testDevices()).Adjust() {
			t.Errorf("%s with uverbs0: not adjusted", name)
		}
		if Decide(wirePod(t, recordedPod(nil)), wireContainer(t, without), testDevices()).Adjust() {
			t.Errorf("%s without devices: adjusted", name)
		}
	}
}

// TestDecideNCCLEnv: a container with devices of two NCCL pools gets the
// NCCL and UCX variables of all of them (the GID index when every port is
// RoCE with one common index); devices of one NCCL pool, or of an NCCL pool
// and a pool without NCCL, get none from the plugin (Allocate's stand).
func TestDecideNCCLEnv(t *testing.T) {
	roce := func(name string) discovery.RDMADevice {
		return discovery.RDMADevice{Name: name, Ports: []discovery.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", RoCEv2GIDIndexes: []int{3}}}}
	}
	devs := Devices{
		Pools: []Pool{
			{Name: "rail0", NCCL: true, Nodes: []DeviceNode{{"/dev/infiniband/uverbs0", 231, 192, "mlx5_0"}, {"/dev/infiniband/uverbs1", 231, 193, "mlx5_1"}}},
			{Name: "rail1", NCCL: true, Nodes: []DeviceNode{{"/dev/infiniband/uverbs2", 231, 194, "mlx5_2"}}},
			{Name: "storage", Nodes: []DeviceNode{{"/dev/infiniband/uverbs3", 231, 195, "mlx5_3"}}},
			// A node whose RDMA device is not known still makes the pool's.
			{Name: "unnamed", NCCL: true, Nodes: []DeviceNode{{"/dev/infiniband/uverbs9", 231, 201, ""}}},
		},
		RDMA: map[string]discovery.RDMADevice{"mlx5_0": roce("mlx5_0"), "mlx5_1": roce("mlx5_1"), "mlx5_2": roce("mlx5_2"), "mlx5_3": roce("mlx5_3")},
	}
	ctr := func(nodes ...string) Container {
		var c Container
		for _, n := range nodes {
			c.Devices = append(c.Devices, Device{Path: "/dev/infiniband/" + n, Type: "c"})
		}
		return c
	}
	tests := []struct {
		name  string
		ctr   Container
		pools []string
		env   []KeyValue
	}{
		{"two rails", ctr("uverbs2", "uverbs0", "uverbs1"), []string{"rail0", "rail1"}, []KeyValue{
			{"NCCL_IB_GID_INDEX", "3"}, {"NCCL_IB_HCA", "=mlx5_0,mlx5_1,mlx5_2"}, {"UCX_IB_GID_INDEX", "3"}, {"UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1,mlx5_2:1"}}},
		{"one rail", ctr("uverbs0", "uverbs1"), []string{"rail0"}, nil},
		{"a rail and storage", ctr("uverbs0", "uverbs3"), []string{"rail0"}, nil},
		{"nothing of ours", ctr("nvidia0"), nil, nil},
		{"a node of no known device", ctr("uverbs9"), nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(Pod{}, tc.ctr, devs)
			if tc.name == "a node of no known device" && !slices.Equal(d.Pools, []string{"unnamed"}) {
				t.Errorf("pools %v, want [unnamed]: the container has its node", d.Pools)
			}
			if diff := cmp.Diff(tc.pools, d.NCCLPools, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("NCCL pools (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.env, d.Env, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
		})
	}
}
