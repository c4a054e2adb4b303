package dra_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// TestPublishWithTheAPIServerAway: an API server that accepts connections
// and never answers (a partition, an overloaded server). Publish returns at
// once with the claims' lookups in place; the ResourceSlices wait in the
// background. Before, Publish waited for the helper's informer to sync:
// called on the daemon's Run goroutine, it held every device plugin pool
// of the node (no socket, /healthz 503) until the API server answered.
func TestPublishWithTheAPIServerAway(t *testing.T) {
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "away", http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	t.Cleanup(func() { close(release) })
	client, err := kubernetes.NewForConfig(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	sockDir := pluginDirs(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: client, PluginDir: filepath.Join(sockDir, "plugin"),
		RegistryDir: filepath.Join(sockDir, "registry"), CDIDir: t.TempDir(), DevRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, node := scan(t, nodesim.HGX())
	done := make(chan error, 1)
	go func() {
		done <- d.Publish(map[string][]discovery.RDMADevice{"ib": node.RDMADevices}, nil, health(node))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Publish still waiting for the API server after 5 s")
	}
	name := dra.DeviceName(node.RDMADevices[0])
	if _, ok := d.Device(dra.PoolName("node-a", "ib"), name); !ok {
		t.Errorf("device %s of pool ib not looked up after Publish", name)
	}
	// A second snapshot while the first publication still waits.
	go func() {
		done <- d.Publish(map[string][]discovery.RDMADevice{"ib": node.RDMADevices[:1]}, nil, health(node))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("second Publish: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Publish waited")
	}
	stopped := make(chan struct{})
	go func() { d.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for the publication")
	}
}
