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
// turn, it removes its socket and spec.
func TestSurgeUpdate(t *testing.T) {
	// Known defect, which is why the chart does not update with surge: the
	// old daemon's loop sees its socket replaced (or, between the new one's
	// remove and bind, gone) and serves again, taking the path back; under
	// -race this test lost the socket or the CDI spec in 1 run of 6. The hand
	// over needs the old daemon to stop serving a path another process bound
	// (docs/device-plugin.md, "Updates").
	t.Skip("surge hand-over of pool sockets races (docs/device-plugin.md, Updates): not the chart's default until fixed")
	old := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.CDIDir = filepath.Join(t.TempDir(), "cdi") })
	sock := filepath.Join(old.Cfg.KubeletDir, deviceplugin.SocketName("hca"))
	spec := filepath.Join(old.Cfg.CDIDir, "kube-rdma-hca.json")
	for _, p := range []string{sock, spec} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("old daemon: %v", err)
		}
	}
	regs := len(old.Kubelet.Registrations())

	cfg := old.Cfg
	cfg.MetricsAddr = old.Agent.MetricsAddr() // the same port: two listeners
	next, err := agenttest.New(cfg)
	if err != nil {
		t.Fatalf("second daemon on the status port %s: %v", cfg.MetricsAddr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- next.Run(ctx) }()
	stopNext := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("new daemon: %v", err)
		}
	}
	select {
	case <-next.Ready():
	case err := <-done:
		t.Fatalf("new daemon exited: %v", err)
	}
	old.WaitFor(t, 5*time.Second, "the new daemon's registration", func(k *kubeletstub.Kubelet) bool {
		return len(k.Registrations()) > regs
	})
	// The registration counted may be the old daemon's again (it re-registers
	// when its socket is replaced): wait for the new daemon's socket.
	var nextSock os.FileInfo
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var err error
		if nextSock, err = os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	// The same socket file: not removed and served again.
	if fi, err := os.Stat(sock); err == nil && !os.SameFile(fi, nextSock) {
		t.Error("the new daemon's socket was replaced after the old daemon stopped")
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
	// The kubelet's calls reach the new daemon through the socket.
	devs, _ := old.Kubelet.Devices(hca)
	if len(devs) == 0 {
		t.Fatal("no devices listed")
	}
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
