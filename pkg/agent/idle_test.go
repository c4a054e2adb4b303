package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestIdleFootprint measures the daemon binary ($DP_IDLE_BIN) idling on the
// 1,024-device synthetic node for $DP_IDLE_SECONDS (default 30), from
// idleSettle after registration, against the kubelet stand-in: resident
// memory and CPU per second. hack/dp-idle.sh runs it.
func TestIdleFootprint(t *testing.T) {
	bin := os.Getenv("DP_IDLE_BIN")
	if bin == "" {
		t.Skip("set DP_IDLE_BIN to a device-plugin binary (hack/dp-idle.sh does)")
	}
	secs := 30
	if v := os.Getenv("DP_IDLE_SECONDS"); v != "" {
		var err error
		if secs, err = strconv.Atoi(v); err != nil {
			t.Fatalf("DP_IDLE_SECONDS: %v", err)
		}
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		t.Fatal(err)
	}
	kdir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kdir) })
	k, err := kubeletstub.Start(kdir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	devRoot := t.TempDir()
	cmd := exec.Command(bin, "run", "--kubelet-dir", kdir, "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot,
		"--dev-root", devRoot, "--cdi-dir", filepath.Join(t.TempDir(), "cdi"), "--pools-file", filepath.Join(t.TempDir(), "_pools.json"),
		"--metrics-addr", "127.0.0.1:0", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("daemon exit after SIGTERM: %v", err)
		}
		if _, err := os.Stat(filepath.Join(kdir, deviceplugin.SocketName("hca"))); !os.IsNotExist(err) {
			t.Errorf("plugin socket after SIGTERM: %v, want removed", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := k.WaitFor(ctx, func(k *kubeletstub.Kubelet) bool {
		d, _ := k.Devices("rdma.kube-rdma.io/hca")
		return len(d) == 1024
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("1024 devices registered and listed %s after start", time.Since(begin).Round(time.Millisecond))
	// Idle begins once the work start-up leaves behind is done: the pass
	// that pages out start-up's pages of the binary (5 s after ready,
	// cmd/device-plugin's pageOutSettle) and the garbage collections the
	// first scan's garbage causes. They run once; the window below is the
	// steady state the daemon spends its life in.
	time.Sleep(idleSettle)
	pid := cmd.Process.Pid
	cpu0 := cpuTicks(t, pid)
	w0 := time.Now()
	settle := time.NewTimer(time.Duration(secs) * time.Second)
	<-settle.C
	cpu1 := cpuTicks(t, pid)
	wall := time.Since(w0).Seconds()
	rss, hwm := procStatus(t, pid, "VmRSS"), procStatus(t, pid, "VmHWM")
	pct := float64(cpu1-cpu0) / 100 / wall * 100 // USER_HZ is 100 on Linux
	t.Logf("idle over %.0fs (from %s after registration) with %s health interval: CPU %.2f%% of one core (%d ticks), RSS %s, peak RSS %s",
		wall, idleSettle, agent.DefaultHealthInterval, pct, cpu1-cpu0, rss, hwm)
	fmt.Printf("IDLE cpu_percent=%.2f rss=%q peak_rss=%q seconds=%.0f devices=1024\n", pct, rss, hwm, wall)
}

// idleSettle is how long after registration the measurement starts.
const idleSettle = 8 * time.Second

// cpuTicks returns utime+stime of a process in clock ticks.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the ")" that ends the command name; utime and stime are
	// fields 14 and 15 of the whole line.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

func procStatus(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}
