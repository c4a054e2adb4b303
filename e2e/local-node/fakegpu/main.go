// Command fakegpu is the local-node e2e's stand-in for NVIDIA's GPU device plugin: it
// advertises the fixture node's GPUs (nodesim.LocalNode's H100s, read from the fixture's sysfs
// and procfs like any GPU of a real node) to the kubelet as nvidia.com/gpu, with their UUIDs
// as device IDs, as NVIDIA's plugin does by default, and answers Allocate with
// NVIDIA_VISIBLE_DEVICES naming them. The fixture has no GPU driver, so there is nothing else
// to give a container. It re-registers when the kubelet restarts (its socket is recreated).
//
//	fakegpu -sysfs-root DIR -proc-root DIR [-kubelet-dir /var/lib/kubelet/device-plugins]
//
// It is e2e tooling (run by e2e/local-node/run.sh); no shipped binary links it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

const resource = "nvidia.com/gpu"

func main() {
	sys := flag.String("sysfs-root", "/sys", "sysfs root of the node's GPUs")
	proc := flag.String("proc-root", "/proc", "procfs root (/proc/driver/nvidia/gpus)")
	dir := flag.String("kubelet-dir", pluginapi.DevicePluginPath, "the kubelet's device plugin directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *sys, *proc, *dir); err != nil {
		log.Fatalf("fakegpu: %v", err)
	}
}

func run(ctx context.Context, sys, proc, dir string) error {
	gpus, _, err := discovery.Scanner{SysRoot: sys, ProcRoot: proc}.GPUs()
	if err != nil {
		return err
	}
	var devs []*pluginapi.Device
	for _, g := range gpus {
		if g.UUID == "" {
			continue
		}
		devs = append(devs, &pluginapi.Device{ID: g.UUID, Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(g.NUMANode)}}}})
		log.Printf("GPU %s at %s, NUMA node %d", g.UUID, g.PCIAddress, g.NUMANode)
	}
	if len(devs) == 0 {
		return fmt.Errorf("no NVIDIA GPU with a UUID under %s and %s", sys, proc)
	}
	sock := filepath.Join(dir, "fakegpu.sock")
	for ctx.Err() == nil {
		if err := serve(ctx, sock, dir, devs); err != nil {
			log.Printf("%v; again in 1 s", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// serve serves the plugin on sock and registers it, until ctx ends or the socket is removed
// (the kubelet removes the plugins' sockets when it restarts).
func serve(ctx context.Context, sock, dir string, devs []*pluginapi.Device) error {
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, &plugin{devs: devs})
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(sock), ResourceName: resource})
	cancel()
	_ = conn.Close()
	if err != nil {
		return fmt.Errorf("register with the kubelet: %w", err)
	}
	log.Printf("registered %s (%d devices)", resource, len(devs))
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		if _, err := os.Stat(sock); err != nil {
			return fmt.Errorf("socket gone (kubelet restart?): %w", err)
		}
	}
}

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devs []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devs}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (p *plugin) Allocate(_ context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	out := &pluginapi.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		out.ContainerResponses = append(out.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(c.DevicesIds, ",")}})
	}
	return out, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
