//go:build rxe_guest

package guest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
)

const dpResource = "rdma.kube-rdma.io/hca"

// TestDevicePlugin runs the device plugin binary on the guest's real sysfs
// against a kubelet stand-in (the registration gRPC server on a unix socket)
// and checks that it advertises the real soft-RoCE devices, that Allocate
// returns /dev/infiniband nodes that exist in the guest and NCCL variables
// that name the device and a real RoCE v2 GID index, and that the device
// turns Unhealthy when its port really goes down (its netdev loses carrier)
// and Healthy again when it comes back.
func TestDevicePlugin(t *testing.T) {
	requireGuest(t)
	bin := requireBinary(t, "KUBE_RDMA_DP_BIN", "./cmd/device-plugin")
	a, _ := rxePair(t, "dpl", "203.0.113", true)

	dir := t.TempDir()
	k, err := kubeletstub.Start(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "device-plugin.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--kubelet-dir", dir, "--cdi-dir", "", "--metrics-addr", "", "--node-name", "rxe-guest")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("device plugin did not exit 10s after SIGTERM")
		}
	}
	t.Cleanup(func() {
		_ = stop()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("device plugin log:\n%s", b)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	device := func() *pluginapi.Device {
		devs, _ := k.Devices(dpResource)
		for _, d := range devs {
			if d.ID == a.RXE { // a virtual device's kubelet ID is its RDMA name
				return d
			}
		}
		return nil
	}
	health := func(want string) {
		t.Helper()
		start := time.Now()
		if err := k.WaitFor(ctx, func(*kubeletstub.Kubelet) bool { d := device(); return d != nil && d.Health == want }); err != nil {
			t.Fatalf("wait for %s %s: %v (devices %v)", a.RXE, want, err, device())
		}
		t.Logf("%s %s after %s", a.RXE, want, time.Since(start).Round(time.Millisecond))
	}
	health(pluginapi.Healthy)

	resp, err := k.Allocate(ctx, dpResource, []string{a.RXE})
	if err != nil {
		t.Fatalf("Allocate(%s): %v", a.RXE, err)
	}
	if len(resp.ContainerResponses) != 1 {
		t.Fatalf("Allocate returned %d container responses", len(resp.ContainerResponses))
	}
	cr := resp.ContainerResponses[0]
	paths := map[string]bool{}
	for _, s := range cr.Devices {
		paths[s.HostPath] = true
		var st syscall.Stat_t
		if err := syscall.Stat(s.HostPath, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			t.Errorf("Allocate names %s, which is not a char device in the guest (%v)", s.HostPath, err)
		}
		if s.ContainerPath != s.HostPath || s.Permissions != "rw" {
			t.Errorf("device spec %+v: want the same path in the container, rw", s)
		}
	}
	uverbs := uverbsOf(t, a.RXE)
	for _, want := range []string{uverbs, "/dev/infiniband/rdma_cm"} {
		if !paths[want] {
			t.Errorf("Allocate lacks %s: %v", want, cr.Devices)
		}
	}
	if got := cr.Envs["NCCL_IB_HCA"]; got != "="+a.RXE {
		t.Errorf("NCCL_IB_HCA = %q, want %q", got, "="+a.RXE)
	}
	if got := cr.Envs["UCX_NET_DEVICES"]; got != a.RXE+":1" {
		t.Errorf("UCX_NET_DEVICES = %q, want %q", got, a.RXE+":1")
	}
	gi, err := strconv.Atoi(cr.Envs["NCCL_IB_GID_INDEX"])
	if err != nil {
		t.Fatalf("NCCL_IB_GID_INDEX = %q: %v", cr.Envs["NCCL_IB_GID_INDEX"], err)
	}
	typ, err := os.ReadFile(filepath.Join(sysInfiniBand, a.RXE, "ports/1/gid_attrs/types", strconv.Itoa(gi)))
	if err != nil || strings.TrimSpace(string(typ)) != "RoCE v2" {
		t.Errorf("NCCL_IB_GID_INDEX=%d is not a RoCE v2 GID of %s: %q %v", gi, a.RXE, typ, err)
	}

	// A real port state change: the rxe port follows its netdev's carrier.
	mustRun(t, a.NS, "ip", "link", "set", a.Netdev, "down")
	health(pluginapi.Unhealthy)
	mustRun(t, a.NS, "ip", "link", "set", a.Netdev, "up")
	health(pluginapi.Healthy)

	if err := stop(); err != nil {
		t.Errorf("device plugin exit after SIGTERM: %v", err)
	}
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	for _, s := range socks {
		if filepath.Base(s) != "kubelet.sock" {
			t.Errorf("socket %s left after SIGTERM", s)
		}
	}
}

// uverbsOf returns the /dev/infiniband/uverbsN node the kernel registered for dev.
func uverbsOf(t *testing.T, dev string) string {
	t.Helper()
	entries, err := os.ReadDir("/sys/class/infiniband_verbs")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/sys/class/infiniband_verbs", e.Name(), "ibdev"))
		if err == nil && strings.TrimSpace(string(b)) == dev {
			return "/dev/infiniband/" + e.Name()
		}
	}
	t.Fatalf("no uverbs node for %s", dev)
	return ""
}
