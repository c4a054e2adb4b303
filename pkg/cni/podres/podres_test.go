package podres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/cni/podres"
	"github.com/kube-rdma/kube-rdma/pkg/cni/podres/podrestest"
)

// getModes are the kubelets' answers to Get: served; Unimplemented (code 12,
// kubelets before 1.27); and code 2 "PodResources API Get method disabled"
// (kubelets 1.27-1.33, feature gate KubeletPodResourcesGet off by default).
var getModes = []struct {
	name string
	set  func(*podrestest.Server)
}{
	{"get", func(*podrestest.Server) {}},
	{"unimplemented", func(s *podrestest.Server) { s.NoGet.Store(true) }},
	{"disabled", func(s *podrestest.Server) { s.GetDisabled.Store(true) }},
}

func TestDevices(t *testing.T) {
	pods := []podrestest.Pod{
		{Namespace: "ns", Name: "a", Devices: map[string][]string{"rdma/hca": {"mlx5_1", "mlx5_0"}, "nvidia.com/gpu": {"GPU-1"}}},
		{Namespace: "ns", Name: "b", Devices: map[string][]string{"rdma/hca": {"mlx5_2"}}},
	}
	for _, m := range getModes {
		t.Run(m.name, func(t *testing.T) {
			srv := podrestest.Start(t, pods...)
			m.set(srv)
			c, err := podres.Dial(srv.Socket)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := c.Devices(ctx, "ns", "a")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"rdma/hca": {"mlx5_0", "mlx5_1"}, "nvidia.com/gpu": {"GPU-1"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Devices (-want +got):\n%s", diff)
			}
			// A client that fell back to List does not ask Get again.
			if _, err := c.Devices(ctx, "ns", "b"); err != nil {
				t.Fatal(err)
			}
			wantGets := int32(2)
			if m.name != "get" {
				wantGets = 1
			}
			if got := srv.GetCalls.Load(); got != wantGets {
				t.Errorf("Get called %d times, want %d", got, wantGets)
			}
		})
	}
}

// TestDevicesUnknownPod: whichever way the kubelet says it (Get: code 2 "pod
// <name> in namespace <ns> not found"; List: the pod is absent), a pod it
// does not know is ErrPodNotFound, not an empty allocation.
func TestDevicesUnknownPod(t *testing.T) {
	for _, m := range getModes {
		t.Run(m.name, func(t *testing.T) {
			srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "a"})
			m.set(srv)
			c, _ := podres.Dial(srv.Socket)
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := c.Devices(ctx, "ns", "nobody")
			if !errors.Is(err, podres.ErrPodNotFound) {
				t.Errorf("Devices of an unknown pod = %v, %v; want ErrPodNotFound", got, err)
			}
		})
	}
}

// TestDevicesOtherErrors: any other answer is an error, with the status the
// kubelet sent, and does not fall back to List.
func TestDevicesOtherErrors(t *testing.T) {
	srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "a"})
	srv.Fail(errors.New("pod a in namespace ns not found, and something else")) // code 2, another text
	c, _ := podres.Dial(srv.Socket)
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Devices(ctx, "ns", "a")
	var se *podres.StatusError
	if !errors.As(err, &se) || se.Code != 2 || errors.Is(err, podres.ErrPodNotFound) {
		t.Errorf("Devices = %v, want the kubelet's code 2 error", err)
	}
	if n := srv.ListCalls.Load(); n != 0 {
		t.Errorf("List called %d times after an unrelated Get error", n)
	}
	dead, _ := podres.Dial(srv.Socket + ".missing")
	defer func() { _ = dead.Close() }()
	if _, err := dead.Devices(ctx, "ns", "a"); err == nil || errors.As(err, &se) {
		t.Errorf("Devices on a missing socket = %v, want a connection error", err)
	}
}

// TestLargeListResponse makes the kubelet's answer larger than HTTP/2's
// initial 64 KiB window, so the client's flow control must keep it coming.
func TestLargeListResponse(t *testing.T) {
	var pods []podrestest.Pod
	for i := range 3000 {
		pods = append(pods, podrestest.Pod{Namespace: "ns", Name: fmt.Sprintf("pod-%04d", i),
			Devices: map[string][]string{"rdma/hca": {fmt.Sprintf("mlx5_%d", i)}, "nvidia.com/gpu": {fmt.Sprintf("GPU-%d", i)}}})
	}
	srv := podrestest.Start(t, pods...)
	srv.NoGet.Store(true) // List carries every pod
	c, _ := podres.Dial(srv.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := c.Devices(ctx, "ns", "pod-2999")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"rdma/hca": {"mlx5_2999"}, "nvidia.com/gpu": {"GPU-2999"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Devices (-want +got):\n%s", diff)
	}
}

func TestList(t *testing.T) {
	srv := podrestest.Start(t,
		podrestest.Pod{Namespace: "ns", Name: "a", Container: "nccl", Devices: map[string][]string{"rdma/hca": {"0000:1a:00.0", "0000:1b:00.0"}, "nvidia.com/gpu": {"GPU-1"}}},
		podrestest.Pod{Namespace: "ns", Name: "b", Devices: map[string][]string{"rdma/shared": {"shared-3"}}},
		podrestest.Pod{Namespace: "ns", Name: "none"},
	)
	c, err := podres.Dial(srv.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []podres.ContainerDevices{
		{Namespace: "ns", Pod: "a", Container: "nccl", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1"}},
		{Namespace: "ns", Pod: "a", Container: "nccl", Resource: "rdma/hca", DeviceIDs: []string{"0000:1a:00.0", "0000:1b:00.0"}},
		{Namespace: "ns", Pod: "b", Container: "main", Resource: "rdma/shared", DeviceIDs: []string{"shared-3"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	srv.Fail(errors.New("kubelet down"))
	if _, err := c.List(ctx); err == nil {
		t.Error("List with a failing kubelet: no error")
	}
}

// TestPodContainerDevices: one pod's devices per container, whichever way
// the kubelet answers.
func TestPodContainerDevices(t *testing.T) {
	pods := []podrestest.Pod{
		{Namespace: "ns", Name: "a", Containers: []podrestest.Container{
			{Name: "trainer", Devices: map[string][]string{"rdma/gpu-nics": {"gpu-nics-slot-3", "gpu-nics-slot-0"}, "nvidia.com/gpu": {"GPU-1", "GPU-2"}}},
			{Name: "sidecar", Devices: map[string][]string{"rdma/gpu-nics": {"gpu-nics-slot-1"}}},
		}},
		{Namespace: "ns", Name: "b", Devices: map[string][]string{"rdma/gpu-nics": {"gpu-nics-slot-2"}}},
	}
	want := []podres.ContainerDevices{
		{Namespace: "ns", Pod: "a", Container: "trainer", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1", "GPU-2"}},
		{Namespace: "ns", Pod: "a", Container: "trainer", Resource: "rdma/gpu-nics", DeviceIDs: []string{"gpu-nics-slot-3", "gpu-nics-slot-0"}},
		{Namespace: "ns", Pod: "a", Container: "sidecar", Resource: "rdma/gpu-nics", DeviceIDs: []string{"gpu-nics-slot-1"}},
	}
	for _, m := range getModes {
		t.Run(m.name, func(t *testing.T) {
			srv := podrestest.Start(t, pods...)
			m.set(srv)
			c, _ := podres.Dial(srv.Socket)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := c.PodContainerDevices(ctx, "ns", "a")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("PodContainerDevices (-want +got):\n%s", diff)
			}
			if _, err := c.PodContainerDevices(ctx, "ns", "gone"); !errors.Is(err, podres.ErrPodNotFound) {
				t.Errorf("unknown pod: %v, want ErrPodNotFound", err)
			}
		})
	}
}
