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
	"time"

	"golang.org/x/sys/unix"
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
	// regs counts registrations; a ListAndWatch stream remembers the count
	// it started under. dropped: the kubelet ended a stream of the latest
	// registration while this process still serves (below, streamEnded).
	regs    int
	dropped bool
	// sock is the socket file this process bound (its inode). During a
	// DaemonSet update with surge the next pod binds the same path: the
	// socket there is then not ours, and this pool is superseded.
	sock os.FileInfo
	// superseded: another process's socket was found at the pool's path.
	// From then on this process neither serves nor registers the pool
	// again, writes no CDI spec or pool file for it, and its stop leaves
	// the socket and the spec to the process that serves the pool now.
	superseded bool
	// registered is closed on the first registration with the kubelet, or
	// when the pool closes without one.
	registered     chan struct{}
	registeredOnce sync.Once

	lastPoolFile []byte // pool.json as last written; Run goroutine only

	// cdiMu orders the CDI spec's writers (writeSpec) and close; once
	// cdiClosed, nothing writes the spec again.
	cdiMu     sync.Mutex
	cdiClosed bool

	// devInfo holds the kubelet device IDs whose device-info file this
	// process wrote (devinfo.go); under devInfoMu, which Allocate takes.
	devInfoMu sync.Mutex
	devInfo   map[string]bool

	// kubelet is the kubelet.sock of the last registration, held open
	// (openKubelet); run's goroutine only.
	kubelet *os.File
}

func newPoolServer(pool config.Pool, resource, dir string, numa int, alloc allocContext, cdi *cdiWriter, log *slog.Logger, m *metrics) *poolServer {
	return &poolServer{
		pool: pool, resource: resource, dir: dir, numa: numa, alloc: alloc, cdi: cdi, m: m,
		log:     log.With("pool", pool.Name, "resource", resource),
		snap:    snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}},
		changed: make(chan struct{}), kicks: make(chan struct{}, 1), registered: make(chan struct{}),
	}
}

// start serves the socket at once (so a pool is served when start returns)
// and runs the register loop until close or ctx's end. A starting process
// takes the pool's path: it replaces whatever socket is there, a stale one
// or the one of the pod it updates.
func (s *poolServer) start(ctx context.Context) {
	if err := s.serve(true); err != nil {
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
	s.registeredOnce.Do(func() { close(s.registered) })
	if s.isSuperseded() {
		s.log.Info("another process serves the pool now; its socket and CDI spec stay")
		return
	}
	s.cdiMu.Lock()
	s.cdiClosed = true // an Allocate still in flight writes no spec after this
	if removeCDI && s.cdi != nil {
		if err := s.cdi.remove(s.pool.Name); err != nil {
			s.log.Warn("remove cdi spec", "err", err)
		}
	}
	s.cdiMu.Unlock()
	s.removeDeviceInfo(nil)
}

// kick makes the loop check its socket and registration again.
func (s *poolServer) kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

// waitRegistered is closed once the pool has registered with the kubelet
// (or closed without registering).
func (s *poolServer) waitRegistered() <-chan struct{} { return s.registered }

// closeWhenRegistered closes done once every pool has registered with the
// kubelet or closed.
func closeWhenRegistered(pools map[string]*poolServer, done chan struct{}) {
	waits := make([]<-chan struct{}, 0, len(pools))
	for _, p := range pools {
		waits = append(waits, p.waitRegistered())
	}
	go func() {
		for _, w := range waits {
			<-w
		}
		close(done)
	}()
}

// run serves and registers, and again after every kick that finds a new
// kubelet, until ctx ends. Failures retry with back-off.
func (s *poolServer) run(ctx context.Context) {
	defer s.stop()
	defer func() {
		if s.kubelet != nil {
			_ = s.kubelet.Close()
			s.kubelet = nil
		}
	}()
	var registered string // the kubelet socket of the last registration
	wait := time.Duration(0)
	for {
		var err error
		registered, err = s.step(ctx, registered)
		var timer *time.Timer
		var retry <-chan time.Time
		if err != nil {
			wait = max(retryFirst, min(2*wait, retryMax))
			s.log.Warn("serve or register failed; retrying", "in", wait, "err", err)
			timer = time.NewTimer(wait)
			retry = timer.C
		} else {
			wait = 0
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

// step does what the pool's socket and the kubelet need now and returns the
// kubelet socket the pool is registered with. It keys on the kubelet, as
// the kubelet's own device manager does: a kubelet (re)start creates
// kubelet.sock after removing every plugin socket, and each pool then
// serves a new socket (if its own is gone) and registers, once per
// kubelet.sock. A plugin socket gone while the kubelet runs on is not
// served again: the kubelet removes sockets only when it restarts, and
// during a DaemonSet update with surge the path is empty for a moment
// between the new pod's remove and bind; taking it back then is the race
// that kept surge off (docs/device-plugin.md, "Updates"). Another process's
// socket at the path supersedes this pool for good.
func (s *poolServer) step(ctx context.Context, registered string) (string, error) {
	if s.isSuperseded() {
		return registered, nil
	}
	kubelet, key, up := s.openKubelet()
	defer func() {
		if kubelet != nil && kubelet != s.kubelet {
			_ = kubelet.Close()
		}
	}()
	restarted := up && key != registered
	if s.generation() == 0 {
		// start's serve failed: take the path as a starting process does.
		if err := s.serve(true); err != nil {
			return registered, err
		}
	} else {
		st, err := s.pathState()
		switch {
		case err != nil:
			return registered, err
		case st == pathOther:
			s.supersede()
			return registered, nil
		case st == pathGone && !restarted:
			s.log.Info("plugin socket removed while the kubelet runs on; serving it again when the kubelet restarts")
			return registered, nil
		case st == pathGone:
			s.log.Info("kubelet restarted and removed the plugin socket; serving again")
			// Bind without removing: a process that binds the path in
			// between owns it, and the next step finds it superseding us.
			if err := s.serve(false); err != nil {
				return registered, err
			}
		}
	}
	if !up {
		s.log.Info("kubelet socket not there yet; waiting for it")
		return registered, nil
	}
	s.mu.Lock()
	dropped := s.dropped
	s.dropped = false
	if restarted || dropped {
		s.regs++ // streams the kubelet opens from now on are this registration's
	}
	s.mu.Unlock()
	if !restarted && !dropped {
		return registered, nil
	}
	if dropped && !restarted {
		s.log.Info("kubelet dropped the pool's ListAndWatch stream; registering again")
	}
	err := s.register(ctx)
	s.m.registration(s.pool.Name, err == nil)
	if err != nil {
		s.mu.Lock()
		s.dropped = s.dropped || dropped
		s.mu.Unlock()
		return registered, err
	}
	s.log.Info("registered with kubelet")
	s.registeredOnce.Do(func() { close(s.registered) })
	if s.kubelet != nil {
		_ = s.kubelet.Close()
	}
	s.kubelet = kubelet
	return key, nil
}

// streamEnded is called when the kubelet ends a ListAndWatch stream that
// started under registration count regs. A stream of the latest
// registration ending while the kubelet runs on means the kubelet dropped
// this pool: kubelets without kubernetes/kubernetes#135437 key device
// plugin clients by resource name alone, and when the old pod of a
// DaemonSet update with surge stops, the end of its stream makes the
// kubelet disconnect the client of the new pod
// (kubernetes/kubernetes#121994). The pool registers again a moment later,
// after the kubelet's disconnect has run. Streams of earlier registrations
// (the kubelet replaced them) change nothing, and a kubelet restart still
// causes one registration.
func (s *poolServer) streamEnded(regs int) {
	s.mu.Lock()
	latest := regs == s.regs && !s.superseded && s.server != nil
	if latest {
		s.dropped = true
	}
	s.mu.Unlock()
	if latest {
		time.AfterFunc(retryFirst, s.kick)
	}
}

// supersede marks the pool as served by another process (logged once).
func (s *poolServer) supersede() {
	s.mu.Lock()
	already := s.superseded
	s.superseded = true
	s.mu.Unlock()
	if !already {
		s.log.Info("another process bound the pool's socket (a DaemonSet update); no longer serving or registering the pool",
			"socket", s.socketPath())
	}
}

func (s *poolServer) isSuperseded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.superseded
}

// What is at the pool's socket path.
const (
	pathOurs  = iota // the socket this process bound
	pathGone         // nothing
	pathOther        // another file: another process's socket
)

// pathState tells what is at the pool's socket path.
func (s *poolServer) pathState() (int, error) {
	s.mu.Lock()
	sock := s.sock
	s.mu.Unlock()
	fi, err := os.Lstat(s.socketPath())
	switch {
	case errors.Is(err, os.ErrNotExist):
		return pathGone, nil
	case err != nil:
		return 0, fmt.Errorf("stat plugin socket: %w", err)
	case sock != nil && os.SameFile(fi, sock):
		return pathOurs, nil
	}
	return pathOther, nil
}

// openKubelet opens kubelet.sock (O_PATH) and names it by device and
// inode; ok is false when it does not exist. While the pool keeps the file
// open (it keeps the one it registered with), the inode cannot be freed, so
// a kubelet.sock created later has another number, even when a restart
// takes less than a tick of the file system's clock.
func (s *poolServer) openKubelet() (f *os.File, key string, ok bool) {
	path := filepath.Join(s.dir, KubeletSocket)
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", false
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, "", false
	}
	return os.NewFile(uintptr(fd), path), fmt.Sprintf("%d/%d", st.Dev, st.Ino), true
}

func (s *poolServer) socketPath() string { return filepath.Join(s.dir, SocketName(s.pool.Name)) }

// serve (re)starts the gRPC server on a fresh socket. With takeOver it
// first removes whatever is at the path (a starting process); without, the
// bind fails when another process holds the path.
func (s *poolServer) serve(takeOver bool) error {
	s.stop()
	path := s.socketPath()
	if takeOver {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove stale socket %s: %w", path, err)
		}
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
	s.server, s.done, s.sock = srv, make(chan struct{}), sock
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
		s.supersede()
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

// serving reports whether the server runs and the socket at its path is
// the one it bound.
func (s *poolServer) serving() bool {
	s.mu.Lock()
	up := s.server != nil
	s.mu.Unlock()
	st, err := s.pathState()
	return up && err == nil && st == pathOurs
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
