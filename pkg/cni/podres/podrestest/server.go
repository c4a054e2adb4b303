// Package podrestest runs a real kubelet PodResources gRPC server on a unix
// socket in a test's temporary directory. It is imported only from _test.go
// files.
package podrestest

import (
	"context"
	"net"
	"path/filepath"
	"sync"
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
}

// Server answers List and Get from its pods. With NoGet set it answers Get
// with Unimplemented, as a kubelet without KubeletPodResourcesGet does.
type Server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	Socket string
	NoGet  bool

	mu   sync.Mutex
	pods []Pod
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
	go g.Serve(l)
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
	ctr := &podresourcesv1.ContainerResources{Name: "main"}
	for res, ids := range p.Devices {
		ctr.Devices = append(ctr.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	return &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name, Containers: []*podresourcesv1.ContainerResources{ctr}}
}

// List implements the kubelet's List.
func (s *Server) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, s.resources(p))
	}
	return resp, nil
}

// Get implements the kubelet's Get.
func (s *Server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	if s.NoGet {
		return nil, status.Error(codes.Unimplemented, "Get is not enabled")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.pods {
		if p.Namespace == req.GetPodNamespace() && p.Name == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: s.resources(p)}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.GetPodNamespace(), req.GetPodName())
}
