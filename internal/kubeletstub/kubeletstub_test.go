package kubeletstub

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func shortDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "ks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

func register(t *testing.T, dir string, req *pluginapi.RegisterRequest) error {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, req)
	return err
}

func TestRegisterRejects(t *testing.T) {
	dir := shortDir(t)
	k, err := Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	tests := []struct {
		name string
		req  *pluginapi.RegisterRequest
	}{
		{"old version", &pluginapi.RegisterRequest{Version: "v1alpha", Endpoint: "x.sock", ResourceName: "a.io/x"}},
		{"native resource", &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "x.sock", ResourceName: "cpu"}},
		{"kubernetes.io resource", &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "x.sock", ResourceName: "kubernetes.io/x"}},
		{"endpoint with a path", &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "../x.sock", ResourceName: "a.io/x"}},
		{"nobody on the endpoint", &pluginapi.RegisterRequest{Version: "v1beta1", Endpoint: "x.sock", ResourceName: "a.io/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := register(t, dir, tt.req); err == nil {
				t.Error("Register succeeded, want an error")
			}
		})
	}
	if n := len(k.Registrations()); n != 0 {
		t.Errorf("%d registrations recorded, want 0", n)
	}
	if _, err := k.Allocate(context.Background(), "a.io/x", []string{"d"}); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("Allocate on an unregistered resource: %v, want ErrNotRegistered", err)
	}
}

func TestRestartClearsSockets(t *testing.T) {
	dir := shortDir(t)
	k, err := Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	l, err := net.Listen("unix", filepath.Join(dir, "plugin.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	if err := os.WriteFile(filepath.Join(dir, "kubelet_internal_checkpoint"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "plugin.sock")); !os.IsNotExist(err) {
		t.Errorf("plugin socket after restart: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet_internal_checkpoint")); err != nil {
		t.Errorf("non-socket file after restart: %v, want kept", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, SocketName)); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("kubelet socket after restart: %v", err)
	}
}

// TestRestartKeepsNewSocket restarts right after Start, many times: a
// listener that grpc's Serve goroutine closes late (after Stop) must not
// unlink the kubelet.sock of the next serve.
func TestRestartKeepsNewSocket(t *testing.T) {
	dir := shortDir(t)
	k, err := Start(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	for i := range 200 {
		if err := k.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Microsecond)
		if fi, err := os.Stat(filepath.Join(dir, SocketName)); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("restart %d: kubelet socket: %v", i, err)
		}
	}
}
