package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
)

// TestMemlockHookInSpecs: the daemon with --memlock-hook-dir installs the
// real kube-rdma binary there, and each pool's CDI spec runs it as a
// createRuntime hook with the pool's memlock (unlimited when unset). Run as
// the runtime runs it (the spec's path and args, an OCI state on stdin), it
// raises the limit of the process in the state. The daemon's exit removes
// the specs and, with them, the binary.
func TestMemlockHookInSpecs(t *testing.T) {
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
	if err := os.WriteFile(conf, []byte(`resourcePrefix: rdma.kube-rdma.io
pools:
- {name: small, mode: exclusive, memlock: 4Mi, selectors: {pciAddresses: ["0000:18:00.0"]}}
- {name: rest, mode: exclusive, nccl: false, selectors: {pciAddresses: ["0000:40:00.0"]}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := parseRunFlags([]string{"--kubelet-dir", t.TempDir(), "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot,
		"--dev-root", t.TempDir(), "--metrics-addr", "", "--cdi-dir", cdiDir, "--alloc-dir", "", "--pools-file", "",
		"--node-state=false", "--pod-resources-socket", "", "--config", conf,
		"--memlock-hook-dir", hooks, "--memlock-hook-binary", bin}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Events = []agent.EventSource{}
	if cfg.plugin.MemlockHook, err = installMemlockHook(cfg.hookDir, cfg.hookBinary); err != nil {
		t.Fatal(err)
	}
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

func TestMemlockHookNeedsCDI(t *testing.T) {
	_, err := parseRunFlags([]string{"--cdi-dir", "", "--memlock-hook-dir", t.TempDir()}, &bytes.Buffer{}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "needs --cdi-dir") {
		t.Fatalf("err %v, want a usage error naming --cdi-dir", err)
	}
	if _, err := installMemlockHook(t.TempDir(), filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing hook binary: no error")
	}
}
