package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/allocator"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

var _ pluginapi.DevicePluginServer = (*poolServer)(nil)

// GetDevicePluginOptions advertises GetPreferredAllocation.
func (s *poolServer) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return s.options(), nil
}

// ListAndWatch sends the device list now and after every change; it ends
// when the server stops (a replaced or removed pool, the daemon exiting).
func (s *poolServer) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	s.mu.Lock()
	done, regs := s.done, s.regs
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
			s.streamEnded(regs)
			return nil
		case <-done:
			return nil
		}
	}
}

// GetPreferredAllocation packs devices by PCIe affinity (allocator.Closest),
// telling the allocator which devices are unhealthy and their link layer so
// that it never prefers an unhealthy device nor mixes link layers when it
// need not.
func (s *poolServer) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	snap, health := s.current()
	if s.pool.GPUAligned() {
		return preferSlots(snap, req)
	}
	topo := allocator.Topology{NUMANodes: s.numa}
	for id, devs := range snap.byID {
		var loc discovery.Location
		if s.pool.Mode == config.Exclusive {
			loc = devs[0].Location()
		}
		topo.Devices = append(topo.Devices, allocator.Device{ID: id, Location: loc,
			Unhealthy: !anyHealthy(devs, health), LinkLayer: linkLayer(devs)})
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

// preferSlots answers for a gpuAligned pool, whose slots are
// interchangeable (the CNI chooses the NICs): any slots do; it returns the
// must-include ones, then healthy available ones, then the rest, each in
// slot order, so the answer is deterministic.
func preferSlots(snap snapshot, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	rank := map[string]int{}
	healthy := map[string]bool{}
	for i, d := range snap.devices {
		rank[d.ID] = i
		healthy[d.ID] = d.Health == pluginapi.Healthy
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		size := int(c.AllocationSize)
		ids := slices.Clone(c.MustIncludeDeviceIDs)
		rest := slices.DeleteFunc(slices.Clone(c.AvailableDeviceIDs), func(id string) bool { return slices.Contains(ids, id) })
		slices.SortStableFunc(rest, func(a, b string) int {
			if healthy[a] != healthy[b] {
				if healthy[a] {
					return -1
				}
				return 1
			}
			return cmp.Compare(rank[a], rank[b])
		})
		ids = append(ids, rest...)
		if len(ids) < size {
			return nil, status.Errorf(codes.InvalidArgument, "preferred allocation: %d slots available, %d requested", len(ids), size)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids[:size]})
	}
	return resp, nil
}

// Allocate answers with the device nodes, environment and CDI devices of
// each container's devices. An ID the pool does not have is an error.
func (s *poolServer) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	snap, _ := s.current()
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr, err := s.alloc.container(s.pool, s.resource, snap, c.DevicesIds)
		if err != nil {
			s.m.allocation(s.pool.Name, false)
			s.log.Warn("allocate", "devices", c.DevicesIds, "err", err)
			code := codes.Internal // the allocation directory could not be made
			if errors.Is(err, ErrUnknownDevice) {
				code = codes.InvalidArgument
			}
			return nil, status.Errorf(code, "allocate %s: %v", s.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	if slices.ContainsFunc(resp.ContainerResponses, func(cr *pluginapi.ContainerAllocateResponse) bool { return len(cr.CdiDevices) > 0 }) {
		// The runtime resolves these names in the spec when it creates the
		// container: the spec must name them now (writeSpec).
		changed, err := s.writeSpec()
		if err != nil {
			s.m.allocation(s.pool.Name, false)
			s.log.Warn("allocate: the pool's CDI spec", "devices", req.ContainerRequests, "err", err)
			return nil, status.Errorf(codes.Internal, "allocate %s: the pool's CDI spec: %v", s.resource, err)
		}
		if changed {
			s.log.Warn("allocate: the pool's CDI spec was gone or named other devices; written again from the members", "path", s.cdi.path(s.pool.Name))
		}
	}
	for _, c := range req.ContainerRequests {
		s.writeDeviceInfo(snap, c.DevicesIds)
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
