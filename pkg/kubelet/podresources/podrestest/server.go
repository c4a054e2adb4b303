// Package podrestest runs a real kubelet PodResources gRPC server on a unix
// socket in a test's temporary directory. It is imported only from _test.go
// files.
package podrestest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Pod is one pod's allocation: resource name to device IDs.
type Pod struct {
	Namespace, Name string
	Devices         map[string][]string
	// Container names the pod's one container; "" is "main".
	Container string
	// Containers, when set, are the pod's containers instead (Devices and
	// Container are then not used).
	Containers []Container
}

// Container is one container's allocation: resource name to device IDs.
type Container struct {
	Name    string
	Devices map[string][]string
}

// Server answers List and Get from its pods with the kubelet's answers
// (kubernetes pkg/kubelet/apis/podresources/server_v1.go): Get of a pod it
// does not know fails with a plain error, which gRPC sends as code 2
// (Unknown) and "pod <name> in namespace <ns> not found".
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string
	// NoGet answers Get with Unimplemented (code 12), as a kubelet older
	// than 1.27, whose API has no Get, does.
	NoGet atomic.Bool
	// GetDisabled answers Get with code 2 (Unknown) and "PodResources API
	// Get method disabled", as kubelets 1.27-1.33 do while the
	// KubeletPodResourcesGet feature gate is off (their default).
	GetDisabled atomic.Bool
	// Hang makes List and Get wait until the caller gives up (its deadline
	// passes or it cancels), as a kubelet that hangs does.
	Hang atomic.Bool
	// GetCalls and ListCalls count the requests, those RateLimit rejected
	// included; Exhausted counts those it rejected.
	GetCalls, ListCalls, Exhausted atomic.Int32

	grpc *grpc.Server
	mu   sync.Mutex
	pods []Pod
	fail error
	// limit is RateLimit's bucket; nil: no limit.
	limit *bucket
}

// RateLimit rejects, as the kubelet's rate limit does (kubernetes
// pkg/kubelet/apis/podresources/grpc/ratelimit.go: a token bucket,
// DefaultQPS 100 and DefaultBurstTokens 10, in front of every method), a
// call that finds no token with code 8 (ResourceExhausted) "rejected by
// rate limit". The bucket starts full; a rejected call takes no token. With
// qps 0 it never refills: the first burst calls are served, then none (0,
// 0: every call is rejected).
func (s *Server) RateLimit(qps float64, burst int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = &bucket{qps: qps, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

// bucket is golang.org/x/time/rate.Limiter's Allow, which the kubelet uses.
type bucket struct {
	qps, burst, tokens float64
	last               time.Time
}

func (b *bucket) allow() bool {
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.qps)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// limited answers a call RateLimit rejects, or nil.
func (s *Server) limited() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit == nil || s.limit.allow() {
		return nil
	}
	s.Exhausted.Add(1)
	return status.Error(codes.ResourceExhausted, "rejected by rate limit")
}

// Start serves on <t.TempDir()>/kubelet.sock until the test ends.
func Start(t testing.TB, pods ...Pod) *Server {
	t.Helper()
	return StartAt(t, filepath.Join(t.TempDir(), "kubelet.sock"), pods...)
}

// StartAt serves on socket until the test ends or Stop, as a kubelet that
// restarts does on its socket.
func StartAt(t testing.TB, socket string, pods ...Pod) *Server {
	t.Helper()
	s := &Server{Socket: socket, pods: pods}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", s.Socket, err)
	}
	s.grpc = grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(s.grpc, s)
	go func() { _ = s.grpc.Serve(l) }()
	t.Cleanup(s.Stop)
	return s
}

// Stop stops serving, drops the connections and removes the socket.
func (s *Server) Stop() { s.grpc.Stop() }

// SetPods replaces the allocations.
func (s *Server) SetPods(pods ...Pod) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

func (s *Server) resources(p Pod) *podresourcesv1.PodResources {
	ctrs := p.Containers
	if len(ctrs) == 0 {
		ctrs = []Container{{Name: cmp.Or(p.Container, "main"), Devices: p.Devices}}
	}
	out := &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name}
	for _, c := range ctrs {
		ctr := &podresourcesv1.ContainerResources{Name: c.Name}
		for _, res := range slices.Sorted(maps.Keys(c.Devices)) {
			ctr.Devices = append(ctr.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: c.Devices[res]})
		}
		out.Containers = append(out.Containers, ctr)
	}
	return out
}

// Fail makes every later call answer err (nil: answer again). A plain
// error reaches the client as code 2 (Unknown) with its text, as the
// kubelet's own errors do.
func (s *Server) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// List implements the kubelet's List.
func (s *Server) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.ListCalls.Add(1)
	if err := s.limited(); err != nil {
		return nil, err
	}
	if s.Hang.Load() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, s.resources(p))
	}
	return resp, nil
}

// Get implements the kubelet's Get.
func (s *Server) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.GetCalls.Add(1)
	if err := s.limited(); err != nil {
		return nil, err
	}
	if s.Hang.Load() {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if s.NoGet.Load() {
		return nil, status.Error(codes.Unimplemented, "unknown method Get for service v1.PodResourcesLister")
	}
	if s.GetDisabled.Load() {
		return nil, fmt.Errorf("PodResources API Get method disabled")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	for _, p := range s.pods {
		if p.Namespace == req.GetPodNamespace() && p.Name == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.resources(p)}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}
