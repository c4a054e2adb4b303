package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/allocator"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// KubeletSocket is the kubelet's registration socket in the plugin dir.
const KubeletSocket = "kubelet.sock"

// registerTimeout bounds one Register call to the kubelet.
const registerTimeout = 5 * time.Second

// SocketName is the socket a pool is served on.
func SocketName(pool string) string { return "kube-rdma-" + pool + ".sock" }

// snapshot is what a pool advertises at one moment.
type snapshot struct {
	devices []*pluginapi.Device
	// byID maps a kubelet device ID to the RDMA devices a container gets for
	// it: one in an exclusive pool, the whole set for a shared slot.
	byID map[string][]discovery.RDMADevice
}

// poolServer serves one pool's DevicePlugin service on its own socket.
type poolServer struct {
	pluginapi.UnimplementedDevicePluginServer

	pool     config.Pool
	resource string
	dir      string
	numa     int
	alloc    allocContext
	log      *slog.Logger
	m        *metrics

	mu      sync.Mutex
	snap    snapshot
	changed chan struct{}
	server  *grpc.Server
	done    chan struct{}
	gen     int // incremented by every serve
}

func newPoolServer(pool config.Pool, resource, dir string, numa int, alloc allocContext, log *slog.Logger, m *metrics) *poolServer {
	return &poolServer{
		pool: pool, resource: resource, dir: dir, numa: numa, alloc: alloc, m: m,
		log:     log.With("pool", pool.Name, "resource", resource),
		snap:    snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}},
		changed: make(chan struct{}),
	}
}

func (s *poolServer) socketPath() string { return filepath.Join(s.dir, SocketName(s.pool.Name)) }

// serve (re)starts the gRPC server on a fresh socket.
func (s *poolServer) serve() error {
	s.stop()
	path := s.socketPath()
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	// A Serve goroutine that starts after stop closes its listener late;
	// unlinking on that close would remove the next serve's socket. stop
	// removes the socket itself.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	s.mu.Lock()
	s.server, s.done = srv, make(chan struct{})
	s.gen++
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	s.log.Info("serving device plugin", "socket", path)
	return nil
}

// stop ends the gRPC server and its ListAndWatch streams and removes the socket.
func (s *poolServer) stop() {
	s.mu.Lock()
	srv, done := s.server, s.done
	s.server, s.done = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	close(done)
	srv.Stop()
	if err := os.Remove(s.socketPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("remove socket", "err", err)
	}
}

func (s *poolServer) generation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// serving reports whether the server runs and its socket still exists.
func (s *poolServer) serving() bool {
	s.mu.Lock()
	up := s.server != nil
	s.mu.Unlock()
	if !up {
		return false
	}
	fi, err := os.Stat(s.socketPath())
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// register tells the kubelet about this pool.
func (s *poolServer) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+filepath.Join(s.dir, KubeletSocket),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("dial kubelet: %w", err)
	}
	defer conn.Close()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     SocketName(s.pool.Name),
		ResourceName: s.resource,
		Options:      s.options(),
	})
	if err != nil {
		return fmt.Errorf("register %s with kubelet: %w", s.resource, err)
	}
	return nil
}

func (s *poolServer) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}
}

// update replaces the advertised devices; streams are woken only when the
// list kubelet sees changes.
func (s *poolServer) update(members []discovery.RDMADevice, health map[string]bool) {
	snap := buildSnapshot(s.pool, members, health)
	s.mu.Lock()
	defer s.mu.Unlock()
	same := slices.EqualFunc(snap.devices, s.snap.devices, func(a, b *pluginapi.Device) bool {
		return a.ID == b.ID && a.Health == b.Health && slices.EqualFunc(a.GetTopology().GetNodes(), b.GetTopology().GetNodes(),
			func(x, y *pluginapi.NUMANode) bool { return x.ID == y.ID })
	})
	s.snap = snap
	if !same {
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

func (s *poolServer) current() snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// DeviceID is the kubelet device ID of an RDMA device in an exclusive pool:
// its PCI address (stable across driver reloads, unlike mlx5_N), the
// auxiliary device of an SF, the RDMA name of a virtual device.
func DeviceID(d discovery.RDMADevice) string {
	switch {
	case d.Kind == discovery.KindSF && d.AuxDevice != "":
		return d.AuxDevice
	case d.PCIAddress != "" && d.Kind != discovery.KindSF:
		return d.PCIAddress
	}
	return d.Name
}

func buildSnapshot(pool config.Pool, members []discovery.RDMADevice, health map[string]bool) snapshot {
	snap := snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}}
	healthStr := func(ok bool) string {
		if ok {
			return pluginapi.Healthy
		}
		return pluginapi.Unhealthy
	}
	if pool.Mode == config.Exclusive {
		for _, d := range members {
			id := DeviceID(d)
			snap.byID[id] = []discovery.RDMADevice{d}
			snap.devices = append(snap.devices, &pluginapi.Device{ID: id, Health: healthStr(health[d.Name]), Topology: topology(d.NUMANode)})
		}
		slices.SortFunc(snap.devices, func(a, b *pluginapi.Device) int { return strings.Compare(a.ID, b.ID) })
		return snap
	}
	if len(members) == 0 {
		return snap
	}
	// A shared set is as healthy as its weakest device: every pod gets all of
	// it and NCCL uses every HCA named in NCCL_IB_HCA.
	ok := true
	var numa []int
	for _, d := range members {
		ok = ok && health[d.Name]
		if d.NUMANode >= 0 && !slices.Contains(numa, d.NUMANode) {
			numa = append(numa, d.NUMANode)
		}
	}
	slices.Sort(numa)
	var topo *pluginapi.TopologyInfo
	if len(numa) > 0 {
		topo = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			topo.Nodes = append(topo.Nodes, &pluginapi.NUMANode{ID: int64(n)})
		}
	}
	for i := range pool.SlotCount() {
		id := pool.Name + "-" + strconv.Itoa(i)
		snap.byID[id] = members
		snap.devices = append(snap.devices, &pluginapi.Device{ID: id, Health: healthStr(ok), Topology: topo})
	}
	return snap
}

func topology(numa int) *pluginapi.TopologyInfo {
	if numa < 0 {
		return nil
	}
	return &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(numa)}}}
}

// GetDevicePluginOptions advertises GetPreferredAllocation.
func (s *poolServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.options(), nil
}

// ListAndWatch sends the device list now and after every change.
func (s *poolServer) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	for {
		s.mu.Lock()
		devs, ch := s.snap.devices, s.changed
		s.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return fmt.Errorf("send device list: %w", err)
		}
		select {
		case <-ch:
		case <-stream.Context().Done():
			return nil
		case <-done:
			return nil
		}
	}
}

// GetPreferredAllocation packs devices by PCIe affinity (allocator.Closest).
func (s *poolServer) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	snap := s.current()
	topo := allocator.Topology{NUMANodes: s.numa}
	for id, devs := range snap.byID {
		var loc discovery.Location
		if s.pool.Mode == config.Exclusive {
			loc = devs[0].Location()
		}
		topo.Devices = append(topo.Devices, allocator.Device{ID: id, Location: loc})
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids, err := allocator.Closest(topo, allocator.Request{
			Available: c.AvailableDeviceIDs, MustInclude: c.MustIncludeDeviceIDs, Size: int(c.AllocationSize),
		})
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "preferred allocation for %s: %v", s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate answers with the device nodes, environment and CDI devices of
// each container's devices. An ID the pool does not have is an error.
func (s *poolServer) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	snap := s.current()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr, err := s.alloc.container(s.pool, s.resource, snap, c.DevicesIds)
		if err != nil {
			s.m.allocation(s.pool.Name, false)
			s.log.Warn("allocate", "devices", c.DevicesIds, "err", err)
			return nil, status.Errorf(codes.InvalidArgument, "allocate %s: %v", s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	for _, c := range req.ContainerRequests {
		s.m.allocation(s.pool.Name, true)
		s.log.Info("allocated", "devices", c.DevicesIds)
	}
	return resp, nil
}

// PreStartContainer is not requested (PreStartRequired is false).
func (s *poolServer) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
