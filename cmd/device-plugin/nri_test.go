package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/nri"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDaemon runs the daemon of these run flags on a sample node, with
// /metrics on a free port, the NRI plugin and the CNI operations collector
// wired as run does; it stops at the test's end.
func startDaemon(t *testing.T, args ...string) (*agent.Agent, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--kubelet-dir", t.TempDir(), "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot, "--dev-root", t.TempDir(),
		"--metrics-addr", "127.0.0.1:0", "--cdi-dir", "", "--alloc-dir", "", "--pools-file", "", "--node-state=false", "--pod-resources-socket", ""}, args...)
	cfg, err := parseRunFlags(args, &bytes.Buffer{}, logs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Events = []agent.EventSource{}
	d, _, err := newAgent(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := startNRI(ctx, cfg, d)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	_, waitCNI, err := startCNIMetrics(ctx, cfg, apiConn{err: errors.New("no API server in this test")}, d)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		wait()
		waitCNI()
	})
	return d, logs
}

func get(t *testing.T, url string) string {
	t.Helper()
	rsp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rsp.Body.Close() }()
	b, _ := io.ReadAll(rsp.Body)
	return string(b)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNRIWithoutRuntimeNRI: --nri on a node whose runtime has NRI off (no
// socket). The daemon serves (/healthz), says so in /state and /metrics and
// once in its log.
func TestNRIWithoutRuntimeNRI(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nri.sock")
	d, logs := startDaemon(t, "--nri", "--nri-socket", socket)
	base := "http://" + d.MetricsAddr()
	waitUntil(t, "the first attempt", func() bool {
		r, ok := d.State().NRI.(nri.Report)
		return ok && r.Attempts >= 1 && strings.Contains(r.Reason, "does not exist")
	})
	if got := get(t, base+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz %q: the daemon must keep serving", got)
	}
	state := get(t, base+"/state")
	for _, want := range []string{`"nri": {`, `"enabled": true`, `"connected": false`, `NRI is not enabled in the container runtime`, socket} {
		if !strings.Contains(state, want) {
			t.Errorf("/state lacks %q:\n%s", want, state)
		}
	}
	if m := get(t, base+"/metrics"); !strings.Contains(m, "\nkube_rdma_nri_connected 0\n") {
		t.Errorf("/metrics lacks kube_rdma_nri_connected 0")
	}
	if n := strings.Count(logs.String(), "NRI not available"); n != 1 {
		t.Errorf("%d log lines about NRI not available, want 1:\n%s", n, logs)
	}
}

// TestNRIOff: without --nri, /state says why and /metrics has no NRI series.
func TestNRIOff(t *testing.T) {
	d, _ := startDaemon(t)
	waitUntil(t, "ready", func() bool {
		select {
		case <-d.Ready():
			return true
		default:
			return false
		}
	})
	base := "http://" + d.MetricsAddr()
	state := get(t, base+"/state")
	if !strings.Contains(state, `"enabled": false`) || !strings.Contains(state, `"reason": "--nri not given"`) {
		t.Errorf("/state without --nri:\n%s", state)
	}
	if m := get(t, base+"/metrics"); strings.Contains(m, "kube_rdma_nri_") {
		t.Errorf("/metrics has NRI series without --nri")
	}
}

// TestNRIThroughDaemon: the daemon on a DGX H100 fixture with --nri, its
// pool's memlock 8Gi, CDI on, against the runtime side of NRI
// (pkg/adaptation, what containerd embeds). A container created with what
// Allocate hands out for one device (its device nodes, or its CDI
// annotation) gets RLIMIT_MEMLOCK 8Gi; one without gets nothing.
func TestNRIThroughDaemon(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	rt, err := adaptation.New("containerd", "v2.2.9",
		func(ctx context.Context, cb adaptation.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
			return nil, nil
		},
		adaptation.WithSocketPath(socket), adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	conf := filepath.Join(dir, "pools.yaml")
	if err := os.WriteFile(conf, []byte("resourcePrefix: rdma.kube-rdma.io\npools:\n- name: hca\n  mode: exclusive\n  memlock: 8Gi\n  selectors: {kinds: [PF]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, _ := startDaemon(t, "--nri", "--nri-socket", socket, "--config", conf, "--cdi-dir", filepath.Join(dir, "cdi"))
	waitUntil(t, "the NRI plugin to register", func() bool {
		r, ok := d.State().NRI.(nri.Report)
		return ok && r.Connected
	})
	v, _ := d.View()
	if len(v.Pools) != 1 || len(v.Pools[0].CDIDevices) == 0 || v.Pools[0].Memlock != 8<<30 {
		t.Fatalf("view pools %+v: want hca with CDI devices and memlock 8Gi", v.Pools)
	}
	member := v.Pools[0].Members[0]
	var nodes []*api.LinuxDevice
	for _, rd := range v.Snapshot.Node.RDMADevices {
		if rd.Name == member {
			for _, c := range rd.CharDevices {
				nodes = append(nodes, &api.LinuxDevice{Path: c, Type: "c", Major: 231, Minor: 192})
			}
		}
	}
	if len(nodes) == 0 {
		t.Fatalf("%s has no device nodes in the fixture", member)
	}
	pod := &api.PodSandbox{Id: "p1", Name: "trainer", Namespace: "ml", Uid: "u1"}
	create := func(c *api.Container) []*api.POSIXRlimit {
		t.Helper()
		c.Id, c.PodSandboxId, c.Name = "c-"+c.Name, "p1", "main"
		rsp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: c})
		if err != nil {
			t.Fatal(err)
		}
		return rsp.GetAdjust().GetRlimits()
	}
	// /state is read while containers are created: the report and the
	// device view must not take the daemon's state lock and the plugin's
	// in opposite orders.
	stop := make(chan struct{})
	readers := make(chan struct{})
	go func() {
		defer close(readers)
		for {
			select {
			case <-stop:
				return
			default:
				_ = d.State()
			}
		}
	}()
	defer func() { close(stop); <-readers }()
	want := []*api.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: 8 << 30, Soft: 8 << 30}}
	opt := cmpopts.IgnoreUnexported(api.POSIXRlimit{})
	// The plugin reports itself connected while it answers Synchronize; the
	// runtime adds it to the plugins it calls once that answer is in. Until
	// then a container gets nothing, so the first one is retried until the
	// runtime calls the plugin.
	var got []*api.POSIXRlimit
	waitUntil(t, "the runtime to call the plugin", func() bool {
		got = create(&api.Container{Linux: &api.LinuxContainer{Devices: nodes}})
		return len(got) > 0
	})
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Errorf("container with %s's device nodes (-want +got):\n%s", member, diff)
	}
	cdi := &api.Container{Annotations: map[string]string{"cdi.k8s.io/kube-rdma_hca": v.Pools[0].CDIDevices[0]}}
	if diff := cmp.Diff(want, create(cdi), opt); diff != "" {
		t.Errorf("container with the CDI annotation (-want +got):\n%s", diff)
	}
	if got := create(&api.Container{Linux: &api.LinuxContainer{}}); len(got) != 0 {
		t.Errorf("container without our devices got %v", got)
	}
}
