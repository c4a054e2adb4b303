package podresources_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// clients are the two implementations, each run on every case below.
var clients = []struct {
	name string
	dial func(t *testing.T, socket string) podresources.Client
}{
	{"h2", func(_ *testing.T, socket string) podresources.Client { return podresources.NewH2Client(socket) }},
	{"grpc", func(t *testing.T, socket string) podresources.Client {
		c, err := grpcclient.Dial(socket, 0)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}},
}

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

// outcome is what a call's answer and error say, the same for both clients.
type outcome struct {
	Ctrs     []podresources.ContainerDevices
	NotFound bool // errors.Is(err, ErrPodNotFound)
	Code     int  // the *StatusError's code; -1: none; 0: no error
	Message  string
	Deadline bool // errors.Is(err, context.DeadlineExceeded)
	// Calls the server saw.
	Gets, Lists int32
}

var kubeletPods = []podrestest.Pod{
	{Namespace: "ns", Name: "a", Containers: []podrestest.Container{
		{Name: "trainer", Devices: map[string][]string{"rdma/gpu-nics": {"gpu-nics-slot-3", "gpu-nics-slot-0"}, "nvidia.com/gpu": {"GPU-1", "GPU-2"}}},
		{Name: "sidecar", Devices: map[string][]string{"rdma/gpu-nics": {"gpu-nics-slot-1"}}},
	}},
	{Namespace: "ns", Name: "b", Container: "nccl", Devices: map[string][]string{"rdma/hca": {"0000:1a:00.0", "0000:1b:00.0"}}},
	{Namespace: "ns", Name: "none"},
}

var (
	podA = []podresources.ContainerDevices{
		{Namespace: "ns", Pod: "a", Container: "trainer", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1", "GPU-2"}},
		{Namespace: "ns", Pod: "a", Container: "trainer", Resource: "rdma/gpu-nics", DeviceIDs: []string{"gpu-nics-slot-3", "gpu-nics-slot-0"}},
		{Namespace: "ns", Pod: "a", Container: "sidecar", Resource: "rdma/gpu-nics", DeviceIDs: []string{"gpu-nics-slot-1"}},
	}
	podB = []podresources.ContainerDevices{
		{Namespace: "ns", Pod: "b", Container: "nccl", Resource: "rdma/hca", DeviceIDs: []string{"0000:1a:00.0", "0000:1b:00.0"}},
	}
)

// TestClients runs one table on both clients against the same real grpc-go
// server and wants the same outcome from each.
func TestClients(t *testing.T) {
	noGet := func(s *podrestest.Server) { s.NoGet.Store(true) }
	disabled := func(s *podrestest.Server) { s.GetDisabled.Store(true) }
	fail := func(err error) func(*podrestest.Server) { return func(s *podrestest.Server) { s.Fail(err) } }
	tests := []struct {
		name string
		set  func(*podrestest.Server) // nil: serve as the kubelet does
		pod  string                   // "": List; else PodContainerDevices of ns/pod
		// missing dials a socket nobody listens on; hang makes the server
		// wait out the call; cancel calls with a context already canceled.
		missing, hang, cancel bool
		// local: the status is the client's own, whose message each words
		// its own way; only the code is compared.
		local bool
		want  outcome
	}{
		{name: "list", want: outcome{Ctrs: append(append([]podresources.ContainerDevices{}, podA...), podB...), Lists: 1}},
		{name: "get", pod: "a", want: outcome{Ctrs: podA, Gets: 1}},
		{name: "get, pod without devices", pod: "none", want: outcome{Gets: 1}},
		{name: "get unimplemented: list", pod: "b", set: noGet, want: outcome{Ctrs: podB, Gets: 1, Lists: 1}},
		{name: "get disabled: list", pod: "b", set: disabled, want: outcome{Ctrs: podB, Gets: 1, Lists: 1}},
		{name: "get disabled, pod without devices", pod: "none", set: disabled, want: outcome{Gets: 1, Lists: 1}},
		{name: "get: unknown pod", pod: "nobody",
			want: outcome{NotFound: true, Code: 2, Message: "pod nobody in namespace ns not found", Gets: 1}},
		{name: "get unimplemented: unknown pod", pod: "nobody", set: noGet, want: outcome{NotFound: true, Code: -1, Gets: 1, Lists: 1}},
		{name: "get disabled: unknown pod", pod: "nobody", set: disabled, want: outcome{NotFound: true, Code: -1, Gets: 1, Lists: 1}},
		{name: "get: code NotFound", pod: "a", set: fail(status.Error(codes.NotFound, "gone")),
			want: outcome{NotFound: true, Code: 5, Message: "gone", Gets: 1}},
		{name: "get: another code 2 error, no fallback", pod: "a", set: fail(errors.New("pod a in namespace ns not found, and something else")),
			want: outcome{Code: 2, Message: "pod a in namespace ns not found, and something else", Gets: 1}},
		{name: "get: unavailable", pod: "a", set: fail(status.Error(codes.Unavailable, "shutting down")),
			want: outcome{Code: 14, Message: "shutting down", Gets: 1}},
		{name: "get: rate limited", pod: "a", set: func(s *podrestest.Server) { s.RateLimit(0, 0) },
			want: outcome{Code: 8, Message: "rejected by rate limit", Gets: 1}},
		{name: "list: rate limited after the burst", set: func(s *podrestest.Server) { s.RateLimit(0, 0) },
			want: outcome{Code: 8, Message: "rejected by rate limit", Lists: 1}},
		{name: "get disabled, list fails", pod: "a", set: func(s *podrestest.Server) { disabled(s); s.Fail(errors.New("kubelet down")) },
			want: outcome{Code: 2, Message: "kubelet down", Gets: 1, Lists: 1}},
		{name: "list fails", set: fail(errors.New("kubelet down")), want: outcome{Code: 2, Message: "kubelet down", Lists: 1}},
		{name: "list: escaped message", set: fail(status.Error(codes.Internal, "50% done: ü\nnext")),
			want: outcome{Code: 13, Message: "50% done: ü\nnext", Lists: 1}},
		{name: "list: socket missing", missing: true, local: true, want: outcome{Code: 14}},
		{name: "get: socket missing", pod: "a", missing: true, local: true, want: outcome{Code: 14}},
		{name: "list: deadline", hang: true, local: true, want: outcome{Code: 4, Deadline: true, Lists: 1}},
		{name: "get: deadline, no fallback", pod: "a", hang: true, local: true, want: outcome{Code: 4, Deadline: true, Gets: 1}},
		{name: "list: canceled", cancel: true, local: true, want: outcome{Code: 1}},
	}
	for _, tt := range tests {
		for _, cl := range clients {
			t.Run(tt.name+"/"+cl.name, func(t *testing.T) {
				srv := podrestest.Start(t, kubeletPods...)
				if tt.set != nil {
					tt.set(srv)
				}
				srv.Hang.Store(tt.hang)
				socket := srv.Socket
				if tt.missing {
					socket += ".missing"
				}
				c := cl.dial(t, socket)
				defer func() { _ = c.Close() }()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if tt.hang {
					ctx, cancel = context.WithTimeout(context.Background(), time.Second)
				}
				defer cancel()
				if tt.cancel {
					cancel()
				}
				var got outcome
				var err error
				if tt.pod == "" {
					got.Ctrs, err = c.List(ctx)
				} else {
					got.Ctrs, err = c.PodContainerDevices(ctx, "ns", tt.pod)
				}
				got.NotFound = errors.Is(err, podresources.ErrPodNotFound)
				got.Deadline = errors.Is(err, context.DeadlineExceeded)
				var se *podresources.StatusError
				switch {
				case errors.As(err, &se):
					got.Code, got.Message = se.Code, se.Message
					if tt.local {
						got.Message = ""
					}
				case err != nil:
					got.Code = -1
				}
				got.Gets, got.Lists = srv.GetCalls.Load(), srv.ListCalls.Load()
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("outcome (-want +got):\n%s\nerr: %v", diff, err)
				}
			})
		}
	}
}

// TestGetFallbackRemembered: a client that fell back to List does not ask
// Get again; one whose kubelet serves Get keeps asking it.
func TestGetFallbackRemembered(t *testing.T) {
	for _, m := range getModes {
		for _, cl := range clients {
			t.Run(m.name+"/"+cl.name, func(t *testing.T) {
				srv := podrestest.Start(t, kubeletPods...)
				m.set(srv)
				c := cl.dial(t, srv.Socket)
				defer func() { _ = c.Close() }()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				for _, pod := range []string{"a", "b", "nobody"} {
					if _, err := c.PodContainerDevices(ctx, "ns", pod); err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
						t.Fatal(err)
					}
				}
				wantGets := int32(3)
				if m.name != "get" {
					wantGets = 1
				}
				if got := srv.GetCalls.Load(); got != wantGets {
					t.Errorf("Get called %d times, want %d", got, wantGets)
				}
			})
		}
	}
}

// TestSkipGet: a client told to skip Get (the CNI plugin's hint from an
// earlier exec) asks List only, whatever the kubelet serves, and
// GetSupport reports only what the kubelet itself answered to Get.
func TestSkipGet(t *testing.T) {
	type result struct {
		Gets, Lists int32
		Support     podresources.GetSupport
	}
	for _, m := range getModes {
		for _, skip := range []bool{false, true} {
			for _, cl := range clients {
				t.Run(fmt.Sprintf("%s/skip=%v/%s", m.name, skip, cl.name), func(t *testing.T) {
					srv := podrestest.Start(t, kubeletPods...)
					m.set(srv)
					c := cl.dial(t, srv.Socket)
					defer func() { _ = c.Close() }()
					s := c.(interface {
						SkipGet()
						GetSupport() podresources.GetSupport
					})
					if got := s.GetSupport(); got != podresources.GetUnknown {
						t.Errorf("GetSupport before any call: %v", got)
					}
					if skip {
						s.SkipGet()
					}
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					got, err := c.PodContainerDevices(ctx, "ns", "b")
					if err != nil {
						t.Fatal(err)
					}
					if diff := cmp.Diff(podB, got); diff != "" {
						t.Errorf("devices (-want +got):\n%s", diff)
					}
					want := result{Gets: 1, Support: podresources.GetServed}
					switch {
					case skip:
						want = result{Lists: 1, Support: podresources.GetUnknown}
					case m.name != "get":
						want = result{Gets: 1, Lists: 1, Support: podresources.GetNotServed}
					}
					res := result{srv.GetCalls.Load(), srv.ListCalls.Load(), s.GetSupport()}
					if diff := cmp.Diff(want, res); diff != "" {
						t.Errorf("calls and GetSupport (-want +got):\n%s", diff)
					}
				})
			}
		}
	}
}

// TestLargeListResponse makes the kubelet's answer larger than HTTP/2's
// initial 64 KiB window (the hand-written client's flow control must keep
// it coming) and than grpc-go's default 4 MiB receive limit.
func TestLargeListResponse(t *testing.T) {
	var pods []podrestest.Pod
	gpu := func(i int) string { return fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i) }
	for i := range 40000 {
		pods = append(pods, podrestest.Pod{Namespace: "ns", Name: fmt.Sprintf("pod-%05d", i),
			Devices: map[string][]string{"rdma/hca": {fmt.Sprintf("mlx5_%d", i)}, "nvidia.com/gpu": {gpu(i)}}})
	}
	srv := podrestest.Start(t, pods...)
	srv.NoGet.Store(true) // List carries every pod
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			c := cl.dial(t, srv.Socket)
			defer func() { _ = c.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got, err := c.PodContainerDevices(ctx, "ns", "pod-39999")
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]string{"rdma/hca": {"mlx5_39999"}, "nvidia.com/gpu": {gpu(39999)}}
			if diff := cmp.Diff(want, podresources.ByResource(got)); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
		})
	}
}

func TestByResource(t *testing.T) {
	got := podresources.ByResource([]podresources.ContainerDevices{
		{Container: "a", Resource: "rdma/hca", DeviceIDs: []string{"mlx5_1", "mlx5_0"}},
		{Container: "b", Resource: "rdma/hca", DeviceIDs: []string{"mlx5_0", "mlx5_2"}},
		{Container: "a", Resource: "nvidia.com/gpu", DeviceIDs: []string{"GPU-1"}},
	})
	want := map[string][]string{"rdma/hca": {"mlx5_0", "mlx5_1", "mlx5_2"}, "nvidia.com/gpu": {"GPU-1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ByResource (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{}, podresources.ByResource(nil)); diff != "" {
		t.Errorf("ByResource(nil) (-want +got):\n%s", diff)
	}
}
