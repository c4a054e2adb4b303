package deviceplugin_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestSurgeUpdate plays a DaemonSet update with surge on one node: the new
// daemon starts beside the old one (same kubelet directory, CDI directory
// and status port), registers, and the old one stops. The new one must keep
// its socket, the pool's CDI spec and the status port; when it stops in
// turn, it removes its socket and spec. The old one, superseded, neither
// serves the path again nor registers (docs/device-plugin.md, "Updates").
func TestSurgeUpdate(t *testing.T) {
	old := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.CDIDir = filepath.Join(t.TempDir(), "cdi") })
	sock := filepath.Join(old.Cfg.KubeletDir, deviceplugin.SocketName("hca"))
	spec := filepath.Join(old.Cfg.CDIDir, "kube-rdma-hca.json")
	for _, p := range []string{sock, spec} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("old daemon: %v", err)
		}
	}
	<-old.Plugin.Registered()
	regs := len(old.Kubelet.Registrations())

	cfg := old.Cfg
	cfg.MetricsAddr = old.Agent.MetricsAddr() // the same port: two listeners
	next, nextDP, err := agenttest.New(cfg)
	if err != nil {
		t.Fatalf("second daemon on the status port %s: %v", cfg.MetricsAddr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- next.Run(ctx) }()
	t.Cleanup(cancel) // a failed test's new daemon stops too
	stopNext := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("new daemon: %v", err)
		}
	}
	select {
	case <-nextDP.Registered():
	case err := <-done:
		t.Fatalf("new daemon exited: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("new daemon: not registered within 5s")
	}
	// The new daemon registered its pool once; the old one, superseded,
	// did not take the path back nor register again.
	if n := len(old.Kubelet.Registrations()); n != regs+1 {
		t.Errorf("%d registrations after the new daemon's, want %d", n, regs+1)
	}
	nextSock, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	// The same socket file: not removed and served again.
	if fi, err := os.Stat(sock); err == nil && !os.SameFile(fi, nextSock) {
		t.Error("the new daemon's socket was replaced after the old daemon stopped")
	}
	if n := len(old.Kubelet.Registrations()); n != regs+1 {
		t.Errorf("%d registrations after the old daemon stopped, want %d", n, regs+1)
	}
	for _, p := range []string{sock, spec} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after the old daemon stopped: %v, want the new daemon's file kept", err)
		}
	}
	// The old listener is closed: every connection reaches the new one.
	for range 5 {
		resp, err := http.Get("http://" + cfg.MetricsAddr + "/healthz")
		if err != nil {
			t.Fatalf("status port after the old daemon stopped: %v", err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/healthz: %s", resp.Status)
		}
	}
	// The kubelet's calls reach the new daemon through the socket. Its
	// ListAndWatch replaces the old one's stream on the new registration
	// and sends the list a moment later (a read can fall in between).
	old.WaitFor(t, 5*time.Second, "the new daemon's device list", func(k *kubeletstub.Kubelet) bool {
		devs, _ := k.Devices(hca)
		return len(devs) > 0
	})
	devs, _ := old.Kubelet.Devices(hca)
	actx, acancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer acancel()
	if _, err := old.Kubelet.Allocate(actx, hca, []string{devs[0].ID}); err != nil {
		t.Errorf("allocate after the old daemon stopped: %v", err)
	}
	stopNext()
	for _, p := range []string{sock, spec} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after the new daemon stopped: %v, want removed", err)
		}
	}
}
