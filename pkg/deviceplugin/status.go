package deviceplugin

import (
	"encoding/json"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// statusServer serves /metrics, /state and /healthz. It only reads: the
// metrics registry, the latest State and whether the daemon is ready.
type statusServer struct {
	listener net.Listener
	m        *metrics
	state    func() State
	ready    <-chan struct{}
	srv      *http.Server
}

func (s *statusServer) start() {
	s.srv = &http.Server{Handler: s.handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(s.listener) }()
}

func (s *statusServer) close() { _ = s.srv.Close() }

func (s *statusServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.state())
	})
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
