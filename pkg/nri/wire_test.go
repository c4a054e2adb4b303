package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
)

// wirePod and wireContainer: what the plugin reads of nri's own encoding
// of a recorded request.
func wirePod(t *testing.T, pod *api.PodSandbox) Pod {
	t.Helper()
	b, err := proto.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	p, err := decodePod(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wireContainer(t *testing.T, ctr *api.Container) Container {
	t.Helper()
	b, err := proto.Marshal(ctr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeContainer(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestDecodeCreateContainer: a CreateContainerRequest nri encodes, read.
func TestDecodeCreateContainer(t *testing.T) {
	ctr := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192), {Path: "/dev/sda", Type: "b", Major: 8, Minor: 1 << 40}},
		nil, "rdma.kube-rdma.io/hca=0000:18:00.0", "nvidia.com/gpu=0")
	pod := recordedPod(map[string]string{AnnotationKey: "8Gi"})
	b, err := proto.Marshal(&api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		t.Fatal(err)
	}
	gotPod, gotCtr, err := createContainerRequest(b)
	if err != nil {
		t.Fatal(err)
	}
	wantPod := Pod{ID: pod.Id, Name: pod.Name, Namespace: pod.Namespace, UID: pod.Uid, Annotations: pod.Annotations}
	if diff := cmp.Diff(wantPod, gotPod); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
	wantCtr := Container{Name: "rdma-bench", Annotations: ctr.Annotations,
		Devices:    []Device{{"/dev/infiniband/uverbs0", "c", 231, 192}, {"/dev/sda", "b", 8, 1 << 40}},
		CDIDevices: []string{"rdma.kube-rdma.io/hca=0000:18:00.0", "nvidia.com/gpu=0"}}
	if diff := cmp.Diff(wantCtr, gotCtr); diff != "" {
		t.Errorf("container (-want +got):\n%s", diff)
	}
	if _, _, err := createContainerRequest([]byte{0x0a, 0x05, 0x01}); err == nil {
		t.Error("truncated request: no error")
	}
}

// TestEncodeResponses: the responses the plugin writes, read by nri.
func TestEncodeResponses(t *testing.T) {
	var cc api.CreateContainerResponse
	rl := []Rlimit{{Type: RlimitMemlock, Hard: ^uint64(0), Soft: 64 * gi}}
	env := []KeyValue{{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}, {"UCX_NET_DEVICES", "mlx5_0:1,mlx5_1:1"}}
	if err := proto.Unmarshal(createContainerResponse(rl, env), &cc); err != nil {
		t.Fatal(err)
	}
	want := []*api.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: ^uint64(0), Soft: 64 * gi}}
	if diff := cmp.Diff(want, cc.GetAdjust().GetRlimits(), cmpopts.IgnoreUnexported(api.POSIXRlimit{})); diff != "" {
		t.Errorf("rlimits (-want +got):\n%s", diff)
	}
	wantEnv := []*api.KeyValue{{Key: "NCCL_IB_HCA", Value: "=mlx5_0,mlx5_1"}, {Key: "UCX_NET_DEVICES", Value: "mlx5_0:1,mlx5_1:1"}}
	if diff := cmp.Diff(wantEnv, cc.GetAdjust().GetEnv(), cmpopts.IgnoreUnexported(api.KeyValue{})); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	if b := createContainerResponse(nil, nil); len(b) != 0 {
		t.Errorf("no rlimits, no env: %x, want an empty response", b)
	}

	var cf api.ConfigureResponse
	if err := proto.Unmarshal(configureResponse(eventCreateContainer, eventRemovePodSandbox), &cf); err != nil {
		t.Fatal(err)
	}
	mask, err := api.ParseEventMask("CreateContainer", "RemovePodSandbox")
	if err != nil {
		t.Fatal(err)
	}
	if got := api.EventMask(cf.Events); got != mask {
		t.Errorf("events %s, want %s", got.PrettyString(), mask.PrettyString())
	}

	var reg api.RegisterPluginRequest
	if err := proto.Unmarshal(registerPluginRequest(PluginName, PluginIndex), &reg); err != nil {
		t.Fatal(err)
	}
	if reg.PluginName != PluginName || reg.PluginIdx != PluginIndex {
		t.Errorf("register %q %q", reg.PluginName, reg.PluginIdx)
	}
	var sync api.SynchronizeResponse
	if err := proto.Unmarshal(synchronizeResponse(true), &sync); err != nil || !sync.More {
		t.Errorf("synchronize response more: %v, %v", sync.More, err)
	}
}

// TestDecodeEvents: the requests the plugin reads besides CreateContainer.
func TestDecodeEvents(t *testing.T) {
	b, err := proto.Marshal(&api.StateChangeEvent{Event: api.Event_REMOVE_POD_SANDBOX, Pod: recordedPod(nil)})
	if err != nil {
		t.Fatal(err)
	}
	ev, pod, err := stateChangeEvent(b)
	if err != nil || ev != eventRemovePodSandbox || pod.ID != "0c1e9f6d5b" {
		t.Errorf("state change: %d %q %v", ev, pod.ID, err)
	}
	b, err = proto.Marshal(&api.ConfigureRequest{RuntimeName: "containerd", RuntimeVersion: "v2.2.9", RequestTimeout: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if rt, v, err := configureRequest(b); rt != "containerd" || v != "v2.2.9" || err != nil {
		t.Errorf("configure: %q %q %v", rt, v, err)
	}
	b, err = proto.Marshal(&api.SynchronizeRequest{Pods: []*api.PodSandbox{recordedPod(nil)}, More: true})
	if err != nil {
		t.Fatal(err)
	}
	if more, err := synchronizeMore(b); !more || err != nil {
		t.Errorf("synchronize more: %v %v", more, err)
	}
}
