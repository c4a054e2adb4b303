package podres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/cni/podres"
	"github.com/kube-rdma/kube-rdma/pkg/cni/podres/podrestest"
)

func TestDevices(t *testing.T) {
	pods := []podrestest.Pod{
		{Namespace: "ns", Name: "a", Devices: map[string][]string{"rdma/hca": {"mlx5_1", "mlx5_0"}, "nvidia.com/gpu": {"GPU-1"}}},
		{Namespace: "ns", Name: "b", Devices: map[string][]string{"rdma/hca": {"mlx5_2"}}},
	}
	for _, noGet := range []bool{false, true} {
		srv := podrestest.Start(t, pods...)
		srv.NoGet = noGet
		c, err := podres.Dial(srv.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := c.Devices(ctx, "ns", "a")
		if err != nil {
			t.Fatalf("noGet=%v: %v", noGet, err)
		}
		want := map[string][]string{"rdma/hca": {"mlx5_0", "mlx5_1"}, "nvidia.com/gpu": {"GPU-1"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("noGet=%v: Devices (-want +got):\n%s", noGet, diff)
		}
	}
}

func TestDevicesUnknownPodAndDeadKubelet(t *testing.T) {
	srv := podrestest.Start(t)
	c, _ := podres.Dial(srv.Socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := c.Devices(ctx, "ns", "nobody")
	if err != nil || len(got) != 0 {
		t.Errorf("Devices of an unknown pod = %v, %v; want none", got, err)
	}
	dead, _ := podres.Dial(srv.Socket + ".missing")
	defer dead.Close()
	if _, err := dead.Devices(ctx, "ns", "p"); err == nil {
		t.Error("Devices on a missing socket succeeded")
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
	srv.NoGet = true // List carries every pod
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
