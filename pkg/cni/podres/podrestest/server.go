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
	// GetCalls and ListCalls count the requests.
	GetCalls, ListCalls atomic.Int32

	mu   sync.Mutex
	pods []Pod
	fail error
}

// Start serves on <t.TempDir()>/kubelet.sock until the test ends.
func Start(t testing.TB, pods ...Pod) *Server {
	t.Helper()
	s := &Server{Socket: filepath.Join(t.TempDir(), "kubelet.sock"), pods: pods}
	l, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatalf("listen on %s: %v", s.Socket, err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, s)
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return s
}

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
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.ListCalls.Add(1)
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
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	s.GetCalls.Add(1)
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
