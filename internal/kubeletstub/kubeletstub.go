// Package kubeletstub is a real gRPC stand-in for the kubelet's device
// manager, for tests and the demo: it serves the Registration service on
// <dir>/kubelet.sock and, for each plugin that registers, dials the plugin's
// socket, reads GetDevicePluginOptions and follows ListAndWatch, as the
// kubelet does. It also calls GetPreferredAllocation and Allocate on demand.
//
// It is a test helper: it holds no global state and writes only under the
// directory it is given.
package kubeletstub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// SocketName is the kubelet's registration socket in the device plugin dir.
const SocketName = "kubelet.sock"

// ErrNotRegistered: no plugin registered the resource.
var ErrNotRegistered = errors.New("resource not registered")

// Kubelet is one running stand-in.
type Kubelet struct {
	dir string
	log *slog.Logger

	mu      sync.Mutex
	server  *grpc.Server
	plugins map[string]*plugin
	regs    []*pluginapi.RegisterRequest
	changed chan struct{} // closed and replaced on every change
	stopped bool
}

type plugin struct {
	req     *pluginapi.RegisterRequest
	conn    *grpc.ClientConn
	client  pluginapi.DevicePluginClient
	opts    *pluginapi.DevicePluginOptions
	devices []*pluginapi.Device
	updates int
	cancel  context.CancelFunc
}

// Start serves the registration socket in dir (created if missing). log may
// be nil.
func Start(dir string, log *slog.Logger) (*Kubelet, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create device plugin dir: %w", err)
	}
	k := &Kubelet{dir: dir, log: log, plugins: map[string]*plugin{}, changed: make(chan struct{})}
	if err := k.serve(); err != nil {
		return nil, err
	}
	return k, nil
}

// Dir is the device plugin directory.
func (k *Kubelet) Dir() string { return k.dir }

func (k *Kubelet) serve() error {
	sock := filepath.Join(k.dir, SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale kubelet socket: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on kubelet socket: %w", err)
	}
	// grpc's Serve closes a listener it gets after Stop; by default that
	// close unlinks the path, which by then may be the next serve's socket.
	// Stop removes the socket itself.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	s := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(s, registration{k: k})
	k.mu.Lock()
	k.server, k.stopped = s, false
	k.mu.Unlock()
	go func() { _ = s.Serve(l) }()
	k.log.Info("kubelet stand-in listening", "socket", sock)
	return nil
}

// Stop stops serving, drops every plugin connection and removes kubelet.sock.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	s := k.server
	plugins := k.plugins
	k.plugins = map[string]*plugin{}
	k.stopped = true
	k.notifyLocked()
	k.mu.Unlock()
	for _, p := range plugins {
		p.cancel()
		_ = p.conn.Close()
	}
	if s != nil {
		s.Stop()
	}
	_ = os.Remove(filepath.Join(k.dir, SocketName))
}

// Restart behaves like a kubelet restart: it stops, removes every socket in
// the directory (the kubelet's device manager clears it on start), and
// serves a new kubelet.sock. Plugins must register again.
func (k *Kubelet) Restart() error {
	k.Stop()
	names, err := os.ReadDir(k.dir)
	if err != nil {
		return fmt.Errorf("list device plugin dir: %w", err)
	}
	for _, e := range names {
		if e.Type()&os.ModeSocket != 0 {
			if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
				return fmt.Errorf("clear device plugin dir: %w", err)
			}
		}
	}
	return k.serve()
}

// Registrations returns every Register call received, oldest first.
func (k *Kubelet) Registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.regs)
}

// Devices returns the last ListAndWatch list of a registered resource.
func (k *Kubelet) Devices(resource string) ([]*pluginapi.Device, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.plugins[resource]
	if !ok || p.updates == 0 {
		return nil, false
	}
	return slices.Clone(p.devices), true
}

// Resources returns the registered resource names, sorted.
func (k *Kubelet) Resources() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for r := range k.plugins {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Options returns what the plugin answered to GetDevicePluginOptions.
func (k *Kubelet) Options(resource string) (*pluginapi.DevicePluginOptions, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.plugins[resource]
	if !ok || p.opts == nil {
		return nil, false
	}
	return p.opts, true
}

// WaitFor blocks until cond holds or ctx ends. cond is called without the
// stand-in's lock held, after every registration or device list update.
func (k *Kubelet) WaitFor(ctx context.Context, cond func(*Kubelet) bool) error {
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		if cond(k) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for kubelet stand-in condition: %w", ctx.Err())
		}
	}
}

func (k *Kubelet) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

func (k *Kubelet) client(resource string) (pluginapi.DevicePluginClient, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.plugins[resource]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotRegistered, resource)
	}
	return p.client, nil
}

// Allocate calls the plugin's Allocate with one container request per ids.
func (k *Kubelet) Allocate(ctx context.Context, resource string, ids ...[]string) (*pluginapi.AllocateResponse, error) {
	c, err := k.client(resource)
	if err != nil {
		return nil, err
	}
	req := &pluginapi.AllocateRequest{}
	for _, i := range ids {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: i})
	}
	return c.Allocate(ctx, req)
}

// GetPreferredAllocation asks the plugin for one container's preference.
func (k *Kubelet) GetPreferredAllocation(ctx context.Context, resource string, available, mustInclude []string, size int) ([]string, error) {
	c, err := k.client(resource)
	if err != nil {
		return nil, err
	}
	resp, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("preferred allocation: %d container responses for 1 request", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
}

// Register checks the request as the kubelet does, then connects to the
// plugin and follows its ListAndWatch stream.
func (r registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k := r.k
	if req.Version != pluginapi.Version {
		return nil, fmt.Errorf("unsupported device plugin API version %q", req.Version)
	}
	if !strings.Contains(req.ResourceName, "/") || strings.Contains(req.ResourceName, "kubernetes.io/") {
		return nil, fmt.Errorf("invalid extended resource name %q", req.ResourceName)
	}
	if req.Endpoint == "" || strings.Contains(req.Endpoint, "/") {
		return nil, fmt.Errorf("invalid endpoint %q", req.Endpoint)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, req.Endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial plugin %s: %w", req.Endpoint, err)
	}
	client := pluginapi.NewDevicePluginClient(conn)
	opts, err := client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("get options of plugin %s: %w", req.Endpoint, err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	stream, err := client.ListAndWatch(wctx, &pluginapi.Empty{})
	if err != nil {
		cancel()
		_ = conn.Close()
		return nil, fmt.Errorf("list and watch plugin %s: %w", req.Endpoint, err)
	}
	p := &plugin{req: req, conn: conn, client: client, opts: opts, cancel: cancel}
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		cancel()
		_ = conn.Close()
		return nil, errors.New("kubelet stand-in is stopping")
	}
	if old, ok := k.plugins[req.ResourceName]; ok {
		old.cancel()
		_ = old.conn.Close()
	}
	k.plugins[req.ResourceName] = p
	k.regs = append(k.regs, req)
	k.notifyLocked()
	k.mu.Unlock()
	k.log.Info("plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint,
		"preferredAllocation", opts.GetPreferredAllocationAvailable)
	go k.watch(p, stream)
	return &pluginapi.Empty{}, nil
}

func (k *Kubelet) watch(p *plugin, stream pluginapi.DevicePlugin_ListAndWatchClient) {
	for {
		resp, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				k.log.Debug("list and watch ended", "resource", p.req.ResourceName, "err", err)
			}
			return
		}
		k.mu.Lock()
		p.devices = resp.Devices
		p.updates++
		k.notifyLocked()
		k.mu.Unlock()
		healthy := 0
		for _, d := range resp.Devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		k.log.Info("device list", "resource", p.req.ResourceName, "devices", len(resp.Devices), "healthy", healthy)
	}
}
