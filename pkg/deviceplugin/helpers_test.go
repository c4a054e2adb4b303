package deviceplugin_test

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
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// fakeNetns is a NetnsModeReader with a fixed answer.
type fakeNetns struct {
	mode rdma.NetnsMode
	err  error
}

func (f fakeNetns) NetnsMode() (rdma.NetnsMode, error) { return f.mode, f.err }

type env struct {
	tree    nodesim.Tree
	kubelet *kubeletstub.Kubelet
	d       *deviceplugin.Daemon
	cfg     deviceplugin.Config
	stop    func() error
}

// start builds topo, starts a kubelet stand-in and the daemon, and waits
// until every configured pool has sent a device list.
func start(t *testing.T, topo nodesim.Topology, mutate func(*deviceplugin.Config)) *env {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
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
	cfg := deviceplugin.Config{
		KubeletDir: kdir, SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, DevRoot: devRoot,
		MetricsAddr: "127.0.0.1:0", NodeName: "node-a", Logger: log,
		NetnsMode: fakeNetns{mode: rdma.NetnsShared}, Events: []deviceplugin.EventSource{},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d, err := deviceplugin.New(cfg)
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
	e := &env{tree: tree, kubelet: k, d: d, cfg: cfg, stop: stop}
	select {
	case <-d.Ready():
	case err := <-done:
		t.Fatalf("daemon exited: %v", err)
	}
	return e
}

// waitFor polls the stand-in until cond holds, failing after within.
func (e *env) waitFor(t *testing.T, within time.Duration, what string, cond func(k *kubeletstub.Kubelet) bool) time.Duration {
	t.Helper()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := e.kubelet.WaitFor(ctx, cond); err != nil {
		t.Fatalf("%s: not within %s: %v", what, within, err)
	}
	return time.Since(begin)
}

// health returns the health of each device of a resource ("" when absent).
func health(k *kubeletstub.Kubelet, resource string) map[string]string {
	devs, _ := k.Devices(resource)
	out := map[string]string{}
	for _, d := range devs {
		out[d.ID] = d.Health
	}
	return out
}

func hasHealth(resource, id, want string) func(k *kubeletstub.Kubelet) bool {
	return func(k *kubeletstub.Kubelet) bool { return health(k, resource)[id] == want }
}

// scrape fetches a path from the metrics listener.
func scrape(t *testing.T, d *deviceplugin.Daemon, path string) string {
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

// metricLine returns the sample line of a series ("name{labels} value").
func metricLine(body, series string) string {
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func ids(devs []*pluginapi.Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.ID)
	}
	return out
}

var errAny = errors.New("any")

// poll checks cond every 10ms until it holds, failing after within.
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
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

// scrapeUntil scrapes path until it has line (or 5 s pass) and returns the
// last body.
func scrapeUntil(t *testing.T, d *deviceplugin.Daemon, path, line string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	body := scrape(t, d, path)
	for !strings.Contains(body, line+"\n") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		body = scrape(t, d, path)
	}
	return body
}
