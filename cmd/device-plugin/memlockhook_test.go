package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// TestMemlockHookInSpecs: the daemon with --memlock-hook-dir installs the
// real kube-rdma binary there, and each pool's CDI spec runs it as a
// createRuntime hook with the pool's memlock (unlimited when unset). Run as
// the runtime runs it (the spec's path and args, an OCI state on stdin), it
// raises the limit of the process in the state. The daemon's exit removes
// the specs and, with them, the binary.
func TestMemlockHookInSpecs(t *testing.T) {
	d := startHookDaemon(t, `resourcePrefix: rdma.kube-rdma.io
pools:
- {name: small, mode: exclusive, memlock: 4Mi, selectors: {pciAddresses: ["0000:18:00.0"]}}
- {name: rest, mode: exclusive, nccl: false, selectors: {pciAddresses: ["0000:40:00.0"]}}
`)
	spec, hooks, stop := d.spec, d.hooks, d.stop
	limits := map[string]string{"small": "4194304", "rest": "unlimited"}
	var hookPath string
	for pool, limit := range limits {
		h := spec(pool).ContainerEdits.Hooks
		if len(h) != 1 || h[0].HookName != "createRuntime" || !strings.HasPrefix(h[0].Path, hooks+"/") ||
			strings.Join(h[0].Args[1:], " ") != "memlock-hook --limit "+limit {
			t.Fatalf("pool %s: hooks %+v, want one createRuntime hook in %s with --limit %s", pool, h, hooks, limit)
		}
		hookPath = h[0].Path
	}

	// The runtime's run of the hook for a container of pool small: its first
	// process at 1 MiB gets 4 MiB (below the hard limit: no privilege needed).
	var own unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &own); err != nil {
		t.Fatal(err)
	}
	if own.Max >= 4<<20 {
		first := exec.Command("sleep", "60")
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
		if err := unix.Prlimit(first.Process.Pid, unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: 1 << 20, Max: own.Max}, nil); err != nil {
			t.Fatal(err)
		}
		h := spec("small").ContainerEdits.Hooks[0]
		run := exec.Command(h.Path, h.Args[1:]...)
		run.Args[0] = h.Args[0]
		run.Stdin = strings.NewReader(`{"ociVersion":"1.2.0","id":"c","status":"creating","pid":` + strconv.Itoa(first.Process.Pid) + `}`)
		if out, err := run.CombinedOutput(); err != nil {
			t.Fatalf("the hook as the runtime runs it: %v\n%s", err, out)
		}
		var got unix.Rlimit
		if err := unix.Prlimit(first.Process.Pid, unix.RLIMIT_MEMLOCK, nil, &got); err != nil {
			t.Fatal(err)
		}
		if got.Cur != 4<<20 || got.Max != own.Max {
			t.Errorf("after the hook: %+v, want soft 4 MiB, hard %d", got, own.Max)
		}
	} else {
		t.Logf("this process's hard RLIMIT_MEMLOCK %d is under 4 MiB: the hook is not run", own.Max)
	}

	stop()
	if _, err := os.Stat(hookPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after the daemon's exit the hook binary %s is still there (%v)", hookPath, err)
	}
}

// hookDaemon is the daemon run with --memlock-hook-dir and the real
// kube-rdma binary on the DGX H100 fixture.
type hookDaemon struct {
	hooks, cdiDir string
	spec          func(pool string) cdispec.Spec
	stop          func()
}

// startHookDaemon builds the kube-rdma binary and runs the daemon with the
// pools config and extra flags until the test ends (or stop).
func startHookDaemon(t *testing.T, pools string, flags ...string) hookDaemon {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go tool to build the kube-rdma binary")
	}
	bin := filepath.Join(t.TempDir(), "kube-rdma")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../cni").CombinedOutput(); err != nil {
		t.Fatalf("build kube-rdma: %v\n%s", err, out)
	}
	dir := t.TempDir()
	hooks, cdiDir, conf := filepath.Join(dir, "hooks"), filepath.Join(dir, "cdi"), filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte(pools), 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseRunFlags(append([]string{"--kubelet-dir", t.TempDir(), "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot,
		"--dev-root", t.TempDir(), "--metrics-addr", "", "--cdi-dir", cdiDir, "--alloc-dir", "", "--pools-file", "",
		"--node-state=false", "--pod-resources-socket", "", "--config", conf,
		"--memlock-hook-dir", hooks, "--memlock-hook-binary", bin}, flags...), &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Events = []agent.EventSource{}
	if cfg.plugin.MemlockHook, err = installMemlockHook(cfg.hookDir, cfg.hookBinary); err != nil {
		t.Fatal(err)
	}
	cfg.plugin.FailClosed = failClosedHook(cfg)
	d, _, err := newAgent(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("daemon: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	spec := func(pool string) cdispec.Spec {
		t.Helper()
		var s cdispec.Spec
		waitUntil(t, pool+"'s CDI spec", func() bool {
			b, err := os.ReadFile(filepath.Join(cdiDir, "kube-rdma-"+pool+".json"))
			return err == nil && json.Unmarshal(b, &s) == nil
		})
		return s
	}
	return hookDaemon{hooks: hooks, cdiDir: cdiDir, spec: spec, stop: stop}
}

func TestMemlockHookNeedsCDI(t *testing.T) {
	_, err := parseRunFlags([]string{"--cdi-dir", "", "--memlock-hook-dir", t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "needs --cdi-dir") {
		t.Fatalf("err %v, want a usage error naming --cdi-dir", err)
	}
	if _, err := installMemlockHook(t.TempDir(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing hook binary: no error")
	}
}

// TestNetdevHookInSpecs: with a chained pool (--cni-chained-pool) and the
// memlock hook installed, each CDI device of that pool carries the same
// binary's netdev hook naming its RDMA devices and --cni-state-dir; other
// pools' devices carry none. Run as the runtime runs it, it refuses a
// container of a sandbox that has no attachment record of the device and
// lets one through once the sandbox's record is there. A shared chained pool
// gets it on its one device, naming every member, only when the entry gives
// its pods child netdevs; --nri-fail-closed=false puts none.
func TestNetdevHookInSpecs(t *testing.T) {
	const pools = `resourcePrefix: rdma.kube-rdma.io
pools:
- {name: roce, mode: %s, slots: %d, nccl: false, selectors: {pciAddresses: ["0000:18:00.0", "0000:40:00.0"]}}
- {name: other, mode: exclusive, nccl: false, selectors: {pciAddresses: ["0000:4f:00.0"]}}
`
	state := t.TempDir()
	netdevHooks := func(s cdispec.Spec) map[string][]string {
		out := map[string][]string{}
		for _, d := range s.Devices {
			for _, h := range d.ContainerEdits.Hooks {
				out[d.Name] = append(out[d.Name], strings.Join(h.Args[1:], " "))
			}
		}
		return out
	}

	d := startHookDaemon(t, fmt.Sprintf(pools, "exclusive", 0), "--cni-chained-pool", "roce", "--cni-state-dir", state)
	roce := d.spec("roce")
	got := netdevHooks(roce)
	if len(roce.Devices) != 2 || len(got) != 2 {
		t.Fatalf("roce's devices %+v: netdev hooks %v, want one on each of 2", roce.Devices, got)
	}
	byPCI := map[string]string{"0000:18:00.0": "mlx5_0", "0000:40:00.0": "mlx5_3"} // the fixture's
	var rdmaOf0 string
	for _, dev := range roce.Devices {
		h := got[dev.Name]
		if len(h) != 1 || h[0] != "netdev-hook --state-dir "+state+" --pool roce --how chained CNI --devices "+byPCI[dev.Name]+"@"+dev.Name {
			t.Errorf("device %s: hooks %q, want one netdev-hook naming its RDMA device and PCI address", dev.Name, h)
		}
		if rdmaOf0 == "" {
			rdmaOf0 = byPCI[dev.Name]
		}
	}
	if h := netdevHooks(d.spec("other")); len(h) != 0 {
		t.Errorf("pool other's devices carry hooks %v, want none", h)
	}

	// As the runtime runs it, for a container of the first device.
	hook := roce.Devices[0].ContainerEdits.Hooks[0]
	bundle := t.TempDir()
	ann := map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": "sb-1",
		"io.kubernetes.cri.sandbox-namespace": "team", "io.kubernetes.cri.sandbox-name": "trainer-0"}
	spec, _ := json.Marshal(map[string]any{"annotations": ann, "linux": map[string]any{"namespaces": []map[string]string{{"type": "network"}}}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	ociState, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": "c", "status": "creating", "pid": 1, "bundle": bundle, "annotations": ann})
	run := func() (string, error) {
		c := exec.Command(hook.Path, hook.Args[1:]...)
		c.Args[0] = hook.Args[0]
		c.Stdin = bytes.NewReader(ociState)
		out, err := c.CombinedOutput()
		return string(out), err
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "kube-rdma: pod team/trainer-0 holds rdma device(s) "+rdmaOf0+" of pool roce (chained CNI) but the kube-rdma CNI plugin attached nothing for it") {
		t.Errorf("a sandbox without its record: %v, %q; want refused", err, out)
	}
	if err := (attachment.Store{Dir: state}).Save(attachment.Attachment{Schema: 1, Key: attachment.Key{ContainerID: "sb-1", IfName: "net1"},
		Netns: "/var/run/netns/x", Devices: []attachment.Device{{RDMA: rdmaOf0}}, Complete: true}); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err != nil || out != "" {
		t.Errorf("a sandbox with its record: %v, %q; want let through silently", err, out)
	}
	d.stop()

	shared := fmt.Sprintf(pools, "shared", 4)
	d = startHookDaemon(t, shared, "--cni-chained-pool", "roce", "--cni-state-dir", state)
	if h := netdevHooks(d.spec("roce")); len(h) != 0 {
		t.Errorf("shared chained pool, sharedNetdev none: hooks %v, want none (its pods get no netdev)", h)
	}
	d.stop()
	d = startHookDaemon(t, shared, "--cni-chained-pool", "roce", "--cni-state-dir", state, "--cni-shared-netdev", "macvlan")
	if h := netdevHooks(d.spec("roce")); len(h["all"]) != 1 || !strings.HasSuffix(h["all"][0], " --devices mlx5_0@0000:18:00.0,mlx5_3@0000:40:00.0") {
		t.Errorf("shared chained pool, sharedNetdev macvlan: hooks %v, want one on device all naming both members", h)
	}
	d.stop()
	d = startHookDaemon(t, fmt.Sprintf(pools, "exclusive", 0), "--cni-chained-pool", "roce", "--cni-state-dir", state, "--nri-fail-closed=false")
	if h := netdevHooks(d.spec("roce")); len(h) != 0 {
		t.Errorf("--nri-fail-closed=false: hooks %v, want none", h)
	}
}
