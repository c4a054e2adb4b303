// Package agenttest runs the node agent (pkg/agent) with its device plugin
// front end (pkg/deviceplugin) on a nodesim tree against the kubelet
// stand-in (internal/kubeletstub), for the tests of both packages and of
// the front ends. It is imported from _test.go files only; no shipped
// binary links it (cmd/device-plugin's deps test).
package agenttest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Config is the agent's and the device plugin front end's options in one,
// as cmd/device-plugin's flags give them.
type Config struct {
	ConfigFile, KubeletDir, SysRoot, ProcRoot, DevRoot, CDIDir, AllocDir string
	PoolsFile, DeviceInfoDir                                             string
	StatusAuth                                                           func(http.Handler) http.Handler
	Allocations                                                          agent.AllocationLister
	AllocGCInterval, AllocGCGrace                                        time.Duration
	FilesInterval                                                        time.Duration
	Uninstalling                                                         func() bool
	QuarantineDirs                                                       map[string]string
	MetricsAddr, NodeName                                                string
	HealthInterval                                                       time.Duration
	Logger                                                               *slog.Logger
	NetnsMode                                                            agent.NetnsModeReader
	Events                                                               []agent.EventSource
	Lent                                                                 agent.LentDevices
	LentFile                                                             string
	// DRA, when set, serves the pools whose frontend is dra.
	DRA agent.FrontEnd
}

// New builds the device plugin front end and the agent that drives it.
func New(c Config) (*agent.Agent, *deviceplugin.Plugin, error) {
	dp, err := deviceplugin.New(deviceplugin.Config{KubeletDir: c.KubeletDir, DevRoot: c.DevRoot, CDIDir: c.CDIDir,
		AllocDir: c.AllocDir, DeviceInfoDir: c.DeviceInfoDir, Logger: c.Logger})
	if err != nil {
		return nil, nil, err
	}
	fes := map[config.Frontend]agent.FrontEnd{config.DevicePlugin: dp}
	if c.DRA != nil {
		fes[config.DRA] = c.DRA
	}
	a, err := agent.New(agent.Config{ConfigFile: c.ConfigFile, SysRoot: c.SysRoot, ProcRoot: c.ProcRoot, AllocDir: c.AllocDir, PoolsFile: c.PoolsFile, Uninstalling: c.Uninstalling, StatusAuth: c.StatusAuth,
		Allocations: c.Allocations, AllocGCInterval: c.AllocGCInterval, AllocGCGrace: c.AllocGCGrace, FilesInterval: c.FilesInterval, QuarantineDirs: c.QuarantineDirs, MetricsAddr: c.MetricsAddr,
		NodeName: c.NodeName, HealthInterval: c.HealthInterval, Logger: c.Logger, NetnsMode: c.NetnsMode, FrontEnds: fes, Events: c.Events, Lent: c.Lent, LentFile: c.LentFile})
	return a, dp, err
}

// FakeNetns is a NetnsModeReader with a fixed answer.
type FakeNetns struct {
	Mode rdma.NetnsMode
	Err  error
}

// NetnsMode returns the fixed answer.
func (f FakeNetns) NetnsMode() (rdma.NetnsMode, error) { return f.Mode, f.Err }

// ErrAny is an error for a FakeNetns that fails.
var ErrAny = errors.New("any")

// Env is a running agent with its kubelet stand-in.
type Env struct {
	Tree    nodesim.Tree
	Kubelet *kubeletstub.Kubelet
	Agent   *agent.Agent
	Plugin  *deviceplugin.Plugin
	Cfg     Config
	// Stop stops the agent and returns Run's error; later calls return nil.
	Stop func() error
}

// Start builds topo, starts a kubelet stand-in and the agent, and waits
// until it is ready. The agent stops at the test's end.
func Start(t *testing.T, topo nodesim.Topology, mutate func(*Config)) *Env {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	return StartOn(t, tree, mutate)
}

// StartOn is Start on a tree already built: a daemon restarted on the node
// another one ran on.
func StartOn(t *testing.T, tree nodesim.Tree, mutate func(*Config)) *Env {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir can be longer.
	kdir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(kdir) })
	devRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(devRoot, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "infiniband/rdma_cm"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	k, err := kubeletstub.Start(kdir, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	cfg := Config{
		KubeletDir: kdir, SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, DevRoot: devRoot,
		MetricsAddr: "127.0.0.1:0", NodeName: "node-a", Logger: log,
		NetnsMode: FakeNetns{Mode: rdma.NetnsShared}, Events: []agent.EventSource{},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, dp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	e := &Env{Tree: tree, Kubelet: k, Agent: d, Plugin: dp, Cfg: cfg, Stop: stop}
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon exited: %v", err)
	}
	return e
}

// WaitFor polls the stand-in until cond holds, failing after within.
func (e *Env) WaitFor(t *testing.T, within time.Duration, what string, cond func(k *kubeletstub.Kubelet) bool) time.Duration {
	t.Helper()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := e.Kubelet.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, within, err)
	}
	return time.Since(begin)
}

// Health returns the health of each device of a resource ("" when absent).
func Health(k *kubeletstub.Kubelet, resource string) map[string]string {
	devs, _ := k.Devices(resource)
	out := map[string]string{}
	for _, d := range devs {
		out[d.ID] = d.Health
	}
	return out
}

// HasHealth is a WaitFor condition: device id of resource has health want.
func HasHealth(resource, id, want string) func(k *kubeletstub.Kubelet) bool {
	return func(k *kubeletstub.Kubelet) bool { return Health(k, resource)[id] == want }
}

// Scrape fetches a path from the agent's metrics listener.
func Scrape(t *testing.T, d *agent.Agent, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + d.MetricsAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ScrapeUntil scrapes path until it has line (or 5 s pass) and returns the
// last body.
func ScrapeUntil(t *testing.T, d *agent.Agent, path, line string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	body := Scrape(t, d, path)
	for !strings.Contains(body, line+"\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		body = Scrape(t, d, path)
	}
	return body
}

// MetricLine returns the sample line of a series ("name{labels} value").
func MetricLine(body, series string) string {
	for l := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// WriteFile replaces path with text by a rename, as a config update does.
func WriteFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// IDs are the devices' IDs.
func IDs(devs []*pluginapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID)
	}
	return out
}

// Poll checks cond every 10ms until it holds, failing after within.
func Poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %s", what, within)
		case <-tick.C:
		}
	}
}

// PokeSource is an EventSource the test fires by hand.
type PokeSource chan struct{}

// Run pokes the watcher whenever the test sends.
func (p PokeSource) Run(ctx context.Context, poke func(nodewatch.Event)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p:
			poke(nodewatch.Event{})
		}
	}
}
