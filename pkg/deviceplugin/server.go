package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// KubeletSocket is the kubelet's registration socket in the plugin dir.
const KubeletSocket = "kubelet.sock"

// registerTimeout bounds one Register call to the kubelet.
const registerTimeout = 5 * time.Second

// Registration retries back off from retryFirst to retryMax.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// SocketName is the socket a pool is served on.
func SocketName(pool string) string { return "kube-rdma-" + pool + ".sock" }

// poolServer serves one pool's DevicePlugin service on its own socket and
// owns its life cycle: serve, register with the kubelet, retry with backoff,
// serve and register again when the kubelet restarts. It also keeps the
// pool's CDI spec.
type poolServer struct {
	pluginapi.UnimplementedDevicePluginServer

	pool     config.Pool
	resource string
	dir      string
	numa     int
	alloc    allocContext
	cdi      *cdiWriter
	log      *slog.Logger
	m        *metrics

	kicks  chan struct{}
	cancel context.CancelFunc
	exited chan struct{}

	mu      sync.Mutex
	members []discovery.RDMADevice
	health  map[string]bool
	snap    snapshot
	changed chan struct{}
	server  *grpc.Server
	done    chan struct{}
	gen     int // incremented by every serve
	// sock is the socket file this process bound (its inode). During a
	// DaemonSet update with surge the next pod binds the same path: the
	// socket there is then not ours, and our stop leaves it, and the pool's
	// CDI spec, to the pod that now serves the pool.
	sock       os.FileInfo
	handedOver bool // the last stop found another process's socket at our path

	lastPoolFile []byte // pool.json as last written; Run goroutine only
}

func newPoolServer(pool config.Pool, resource, dir string, numa int, alloc allocContext, cdi *cdiWriter, log *slog.Logger, m *metrics) *poolServer {
	return &poolServer{
		pool: pool, resource: resource, dir: dir, numa: numa, alloc: alloc, cdi: cdi, m: m,
		log:     log.With("pool", pool.Name, "resource", resource),
		snap:    snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}},
		changed: make(chan struct{}), kicks: make(chan struct{}, 1),
	}
}

// start serves the socket at once (so a pool is served when start returns)
// and runs the register loop until close or ctx's end.
func (s *poolServer) start(ctx context.Context) {
	if err := s.serve(); err != nil {
		s.log.Error("serve pool; retrying", "err", err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.exited = make(chan struct{})
	go func() {
		defer close(s.exited)
		s.run(ctx)
	}()
}

// close stops the loop and the server (ending ListAndWatch streams and
// removing the socket) and, with removeCDI, the pool's CDI spec.
func (s *poolServer) close(removeCDI bool) {
	if s.cancel != nil {
		s.cancel()
		<-s.exited
	}
	s.stop()
	s.mu.Lock()
	handedOver := s.handedOver
	s.mu.Unlock()
	if handedOver {
		s.log.Info("another process serves the pool now; its socket and CDI spec stay")
		return
	}
	if removeCDI && s.cdi != nil {
		if err := s.cdi.remove(s.pool.Name); err != nil {
			s.log.Warn("remove cdi spec", "err", err)
		}
	}
}

// kick makes the loop check its socket and registration again.
func (s *poolServer) kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

// run serves and registers, and does it again after every kick that finds
// the socket gone or a new kubelet. A pool registers once per kubelet
// socket and serve: a kubelet restart shows up both as our socket's
// removal and as kubelet.sock's creation, and the second must not register
// again.
func (s *poolServer) run(ctx context.Context) {
	defer s.stop()
	var registered string // kubelet socket and serve of the last registration
	wait := time.Duration(0)
	for {
		err := s.ensureServing()
		key, up := s.kubeletKey()
		if err == nil && up && key != registered {
			err = s.register(ctx)
			s.m.registration(s.pool.Name, err == nil)
			if err == nil {
				registered, wait = key, 0
				s.log.Info("registered with kubelet")
			}
		} else if err == nil && !up {
			s.log.Info("kubelet socket not there yet; waiting for it")
		}
		var timer *time.Timer
		var retry <-chan time.Time
		if err != nil {
			wait = max(retryFirst, min(2*wait, retryMax))
			s.log.Warn("serve or register failed; retrying", "in", wait, "err", err)
			timer = time.NewTimer(wait)
			retry = timer.C
		}
		select {
		case <-ctx.Done():
		case <-s.kicks:
		case <-retry:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// kubeletKey names the kubelet socket (inode and mtime) and our serve
// generation; ok is false when the kubelet socket does not exist.
func (s *poolServer) kubeletKey() (string, bool) {
	fi, err := os.Stat(filepath.Join(s.dir, KubeletSocket))
	if err != nil {
		return "", false
	}
	var ino uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino = st.Ino
	}
	return fmt.Sprintf("%d/%d/%d", ino, fi.ModTime().UnixNano(), s.generation()), true
}

func (s *poolServer) socketPath() string { return filepath.Join(s.dir, SocketName(s.pool.Name)) }

// ensureServing serves again when the server is down or its socket is gone.
func (s *poolServer) ensureServing() error {
	if s.serving() {
		return nil
	}
	if s.generation() > 0 {
		s.log.Info("plugin socket removed; serving again")
	}
	return s.serve()
}

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
	sock, err := os.Stat(path)
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("stat socket %s: %w", path, err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, s)
	s.mu.Lock()
	s.server, s.done, s.sock, s.handedOver = srv, make(chan struct{}), sock, false
	s.gen++
	s.mu.Unlock()
	go func() { _ = srv.Serve(l) }()
	s.log.Info("serving device plugin", "socket", path)
	return nil
}

// stop ends the gRPC server and its ListAndWatch streams and removes the
// socket if it is still the one this server bound: a newer pod's socket at
// the same path (a DaemonSet update with surge: it binds, registers, and
// the kubelet moves to it) is left alone.
func (s *poolServer) stop() {
	s.mu.Lock()
	srv, done, sock := s.server, s.done, s.sock
	s.server, s.done = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	close(done)
	srv.Stop()
	path := s.socketPath()
	cur, err := os.Stat(path)
	if err != nil {
		return
	}
	if !os.SameFile(cur, sock) {
		s.mu.Lock()
		s.handedOver = true
		s.mu.Unlock()
		return
	}
	// Between the Stat and the Remove a new pod could bind the path; it
	// binds only after removing the old file itself, and a window of a few
	// microseconds against a pod that starts in seconds is accepted.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
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
	defer func() { _ = conn.Close() }()
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
