package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
)

// listenStatus listens on the status address with SO_REUSEPORT. The chart
// runs the daemon on the host network, and a DaemonSet update with surge
// (maxSurge 1, which the DRA front end's rolling update needs) runs the old
// and the new pod on one node for a while: both must hold the port. The
// other way, the new pod retrying its bind until the old one exits, leaves
// the new pod without /metrics and /state meanwhile (the pods' probes do
// not use this port: either pod may answer it; see --probe-socket); with
// SO_REUSEPORT both serve, the kernel spreads connections over both, and
// when the old pod closes its listener the new one takes every connection
// without a refused scrape. The kernel lets only a process of the same
// user share the port.
func listenStatus(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp", addr)
}

// statusServer serves /metrics, /state and /healthz. It only reads: the
// metrics registry, the latest State and whether the daemon is ready.
// /metrics and /state go through auth when it is set; /healthz never does
// (the kubelet's probes carry no token).
type statusServer struct {
	listener net.Listener
	m        *metrics
	state    func() State
	ready    <-chan struct{}
	auth     func(http.Handler) http.Handler // nil: none
	srv      *http.Server
}

func (s *statusServer) start() {
	s.srv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(s.listener) }()
}

func (s *statusServer) close() { _ = s.srv.Close() }

func (s *statusServer) handler() http.Handler {
	protect := s.auth
	if protect == nil {
		protect = func(h http.Handler) http.Handler { return h }
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", protect(promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{})))
	mux.Handle("/state", protect(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.state())
	})))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-s.ready:
			_, _ = w.Write([]byte("ok\n"))
		default:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	})
	return mux
}
