package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/kube-rdma/kube-rdma/internal/cli"
)

// TestMetricsAuth: auto guards a status address off the loopback; with
// the guard on and no API server the daemon refuses to start, naming why,
// rather than serve /metrics and /state to anyone; with one, the guard is
// the daemon's StatusAuth.
func TestMetricsAuth(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	noAPI := apiConn{err: func() error { _, err := restConfig(""); return err }()}
	withAPI := apiConn{clients: &apiClients{kube: fake.NewClientset()}}
	for _, c := range []struct {
		name      string
		args      []string
		api       apiConn
		wantErr   error // nil: starts
		wantGuard bool
	}{
		{"default: loopback, none", nil, noAPI, nil, false},
		{"auto, every interface, no API server", []string{"--metrics-addr", ":9478"}, noAPI, rest.ErrNotInCluster, false},
		{"auto, node IP, no API server", []string{"--metrics-addr", "10.0.0.5:9478"}, noAPI, rest.ErrNotInCluster, false},
		{"on, loopback, no API server", []string{"--metrics-auth", "on"}, noAPI, rest.ErrNotInCluster, false},
		{"off, every interface", []string{"--metrics-addr", ":9478", "--metrics-auth", "off"}, noAPI, nil, false},
		{"no status server", []string{"--metrics-addr", "", "--metrics-auth", "on"}, noAPI, nil, false},
		{"auto, every interface, API server", []string{"--metrics-addr", ":9478"}, withAPI, nil, true},
		{"on, loopback, API server", []string{"--metrics-auth", "on"}, withAPI, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseRunFlags(c.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = setStatusAuth(&cfg, c.api)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("error %v, want %v", err, c.wantErr)
			}
			if got := cfg.StatusAuth != nil; got != c.wantGuard {
				t.Fatalf("guard set %v, want %v", got, c.wantGuard)
			}
			if !c.wantGuard {
				return
			}
			// The guard is the real filter: no token, 401, before any API call.
			w := httptest.NewRecorder()
			cfg.StatusAuth(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if w.Code != http.StatusUnauthorized {
				t.Errorf("GET /metrics without a token: %d, want 401", w.Code)
			}
		})
	}
}

// TestMetricsAuthRefusesToStart: `run` with the status server on every
// interface and no API server exits at start with the reason.
func TestMetricsAuthRefusesToStart(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	// Bounded, should it start after all.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := dispatch(ctx, []string{"run", "--metrics-addr", "127.0.0.1:0", "--metrics-auth", "on", "--pod-resources-socket", "", "--kubelet-dir", t.TempDir()}, io.Discard, io.Discard)
	if !errors.Is(err, rest.ErrNotInCluster) || errors.Is(err, cli.ErrUsage) {
		t.Errorf("run: %v, want a refusal that wraps rest.ErrNotInCluster", err)
	}
}

func TestMetricsAuthUsage(t *testing.T) {
	var errOut bytes.Buffer
	_, err := parseRunFlags([]string{"--metrics-auth", "yes"}, io.Discard, &errOut)
	if !errors.Is(err, cli.ErrUsage) {
		t.Errorf("--metrics-auth yes: %v, want a usage error", err)
	}
}
