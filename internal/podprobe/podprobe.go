// Package podprobe answers the kubelet's probes of the daemon's pod from the
// pod's own process, over a unix socket in a directory of that pod alone (an
// emptyDir), and is the client the exec probe (`device-plugin probe`) runs.
// The status port cannot give such an answer: on the host network the old
// and the new pod of a DaemonSet update with surge both listen on it
// (SO_REUSEPORT), and either may answer a probe meant for the other.
//
// It owns the socket and its small HTTP protocol, nothing else: what a
// check means is the caller's, a channel closed once the check holds.
package podprobe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// ErrNotYet is a check that does not hold yet (503 from the server).
var ErrNotYet = errors.New("not yet")

// Checks names each check by the channel closed once it holds.
type Checks map[string]<-chan struct{}

// Server answers GET /<check> on the socket: 200 once the check's channel
// is closed, 503 before, 404 for a check it does not know.
type Server struct {
	path string
	l    net.Listener
	srv  *http.Server
}

// Listen binds the socket at path, replacing a file there: the directory
// is the pod's own, so a file there is this pod's previous container's.
func Listen(path string, checks Checks) (*Server, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale probe socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on probe socket %s: %w", path, err)
	}
	mux := http.NewServeMux()
	for name, ch := range checks {
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, _ *http.Request) {
			select {
			case <-ch:
				_, _ = io.WriteString(w, "ok\n")
			default:
				http.Error(w, name+": not yet", http.StatusServiceUnavailable)
			}
		})
	}
	s := &Server{path: path, l: l, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() { _ = s.srv.Serve(l) }()
	return s, nil
}

// Close stops answering and removes the socket.
func (s *Server) Close() error {
	err := s.srv.Close()
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Check asks the server at path whether a check holds: nil when it does,
// an error wrapping ErrNotYet when it does not yet, another error when
// nothing answers (no process, or another process's socket).
func Check(ctx context.Context, path, name string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://pod/"+name, nil)
	if err != nil {
		return fmt.Errorf("probe %s: %w", name, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s on %s: %w", name, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusServiceUnavailable:
		return fmt.Errorf("probe %s: %w", name, ErrNotYet)
	}
	return fmt.Errorf("probe %s: %s: %s", name, resp.Status, strings.TrimSpace(string(body)))
}
