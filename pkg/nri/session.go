package nri

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/net/multiplex"
	"github.com/containerd/ttrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
)

// The ttrpc services of the NRI protocol (api.proto's package and services).
const (
	runtimeService = "nri.pkg.api.v1alpha1.Runtime"
	pluginService  = "nri.pkg.api.v1alpha1.Plugin"
)

// registrationTimeout bounds RegisterPlugin (nri's stub default).
const registrationTimeout = 5 * time.Second

// errServed: the session was connected and then ended.
var errServed = errors.New("nri connection ended")

// session runs one connection as nri's stub does: the socket carries two
// ttrpc connections (multiplex), ours serving the plugin service and the
// runtime's; register, wait for Configure, serve until the connection ends
// or ctx does.
func (p *Plugin) session(ctx context.Context) error {
	p.mu.Lock()
	p.report.Attempts++
	p.mu.Unlock()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", p.cfg.Socket)
	if err != nil {
		return fmt.Errorf("connect to NRI: %w", err)
	}
	mux := multiplex.Multiplex(conn)
	defer func() { _ = mux.Close() }() // closes conn; the runtime sees the plugin go
	l, err := mux.Listen(multiplex.PluginServiceConn)
	if err != nil {
		return fmt.Errorf("nri plugin service connection: %w", err)
	}
	srv, err := ttrpc.NewServer()
	if err != nil {
		return fmt.Errorf("nri ttrpc server: %w", err)
	}
	h := &handler{p: p, configured: make(chan struct{})}
	srv.RegisterService(pluginService, &ttrpc.ServiceDesc{Methods: h.methods()})
	served := make(chan struct{})
	go func() {
		_ = srv.Serve(ctx, l) // ends with srv.Close below, or with the connection
		close(served)
	}()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	rc, err := mux.Open(multiplex.RuntimeServiceConn)
	if err != nil {
		return fmt.Errorf("nri runtime service connection: %w", err)
	}
	closed := make(chan struct{})
	client := ttrpc.NewClient(rc, ttrpc.WithOnClose(func() { close(closed) }))
	defer func() { _ = client.Close() }()

	rctx, cancel := context.WithTimeout(ctx, registrationTimeout)
	err = client.Call(rctx, runtimeService, "RegisterPlugin", raw(registerPluginRequest(PluginName, PluginIndex)), &emptypb.Empty{})
	cancel()
	if err != nil {
		return fmt.Errorf("register with the runtime: %w", err)
	}
	select {
	case <-h.configured:
	case <-closed:
		return errors.New("the runtime closed the connection before configuring the plugin")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-closed:
		p.setDown("the runtime closed the connection (restarting?)")
		return errServed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handler serves the plugin service of one connection; only CreateContainer
// adjusts.
type handler struct {
	p          *Plugin
	configured chan struct{}
	once       sync.Once
}

// call is one method of the plugin service: the request's bytes in, the
// response's out.
type call func(context.Context, []byte) ([]byte, error)

func (h *handler) methods() map[string]ttrpc.Method {
	calls := map[string]call{
		"Configure":       h.configure,
		"Synchronize":     h.synchronize,
		"Shutdown":        func(context.Context, []byte) ([]byte, error) { return nil, nil },
		"CreateContainer": h.createContainer,
		"StateChange":     h.stateChange,
	}
	m := make(map[string]ttrpc.Method, len(calls))
	for name, c := range calls {
		m[name] = func(ctx context.Context, unmarshal func(any) error) (any, error) {
			req := &emptypb.Empty{}
			if err := unmarshal(req); err != nil {
				return nil, fmt.Errorf("nri %s request: %w", name, err)
			}
			rsp, err := c(ctx, rawBytes(req))
			if err != nil {
				return nil, fmt.Errorf("nri %s: %w", name, err)
			}
			return raw(rsp), nil
		}
	}
	return m
}

// configure subscribes to container creation (to adjust) and pod removal
// (to forget the pod's logged annotation problem).
func (h *handler) configure(_ context.Context, req []byte) ([]byte, error) {
	runtime, version, err := configureRequest(req)
	if err != nil {
		return nil, err
	}
	h.p.log.Debug("NRI configure", "runtime", runtime, "version", version)
	h.once.Do(func() { close(h.configured) })
	return configureResponse(eventCreateContainer, eventRemovePodSandbox), nil
}

// synchronize: the runtime sends it once per connection, after
// registration, before it calls the plugin for containers: the plugin is
// connected from the last part on. Running containers keep their limits;
// nothing is updated.
func (h *handler) synchronize(_ context.Context, req []byte) ([]byte, error) {
	more, err := synchronizeMore(req)
	if err != nil {
		return nil, err
	}
	if !more {
		h.p.setUp()
		h.p.log.Info("NRI plugin registered", "socket", h.p.cfg.Socket, "plugin", PluginIndex+"-"+PluginName)
	}
	return synchronizeResponse(more), nil
}

func (h *handler) createContainer(_ context.Context, req []byte) ([]byte, error) {
	pod, ctr, err := createContainerRequest(req)
	if err != nil {
		return nil, err
	}
	d, err := h.p.create(pod, ctr)
	if err != nil {
		// The runtime fails the container's creation with this error
		// (kubectl describe pod shows it in the CreateContainerError).
		return nil, err
	}
	return createContainerResponse(d.Rlimits(), d.Env), nil
}

func (h *handler) stateChange(_ context.Context, req []byte) ([]byte, error) {
	event, pod, err := stateChangeEvent(req)
	if err != nil {
		return nil, err
	}
	if event == eventRemovePodSandbox {
		h.p.forget(pod)
	}
	return nil, nil
}

// create decides the rlimits (and, for devices of several NCCL pools, the
// NCCL and UCX variables) of a container being created, counts and logs the
// decision. With FailClosed it refuses a container whose pod has no netdevs
// of its devices.
func (p *Plugin) create(pod Pod, ctr Container) (Decision, error) {
	devs := p.devices()
	d := Decide(pod, ctr, devs)
	if p.cfg.FailClosed {
		err := claimRefusal(pod, ctr, devs, p.cfg.Claims, p.cfg.Records)
		if err == nil && d.Adjust() {
			err = refusal(pod, ctr, devs, p.cfg.Records)
		}
		if err != nil {
			p.decisions.WithLabelValues("refused").Inc()
			p.mu.Lock()
			p.report.Refused++
			p.mu.Unlock()
			p.log.Warn("container refused: its pod has no netdevs of its rdma devices", "pod", pod.Namespace+"/"+pod.Name,
				"container", ctr.Name, "err", err)
			return Decision{}, err
		}
	}
	if !d.Adjust() {
		p.decisions.WithLabelValues("untouched").Inc()
		return Decision{}, nil
	}
	p.decisions.WithLabelValues("adjusted").Inc()
	p.mu.Lock()
	p.report.Adjusted++
	first := d.AnnotationIgnored != nil && !p.warned[pod.ID]
	if first {
		if len(p.warned) >= maxWarned {
			clear(p.warned)
		}
		p.warned[pod.ID] = true
	}
	p.mu.Unlock()
	if first {
		p.log.Warn("memlock annotation ignored", "pod", pod.Namespace+"/"+pod.Name, "err", d.AnnotationIgnored)
	}
	p.log.Debug("memlock set", "pod", pod.Namespace+"/"+pod.Name, "container", ctr.Name,
		"pools", d.Pools, "limit", config.FormatMemlock(d.Limit))
	if len(d.Env) > 0 {
		p.log.Info("NCCL and UCX variables set for the devices of several NCCL pools", "pod", pod.Namespace+"/"+pod.Name,
			"container", ctr.Name, "pools", d.NCCLPools, "env", d.Env)
	}
	return d, nil
}

// forget drops a removed pod's logged annotation problem.
func (p *Plugin) forget(pod Pod) {
	p.mu.Lock()
	delete(p.warned, pod.ID)
	p.mu.Unlock()
}
