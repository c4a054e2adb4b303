package cniinstall

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// logRecorder keeps the messages Run logs, to wait for one.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// eventually polls cond until it holds or ten seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type env struct {
	bin, conf, state, exe, plugin string
	log                           *logRecorder
}

func newEnv(t *testing.T) env {
	t.Helper()
	root := t.TempDir()
	e := env{bin: filepath.Join(root, "bin"), conf: filepath.Join(root, "net.d"), state: filepath.Join(root, "state"),
		exe: filepath.Join(root, "exe"), plugin: filepath.Join(root, "plugin.json"), log: &logRecorder{}}
	for _, d := range []string{e.bin, e.conf} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, e.exe, "\x7fELF kube-rdma", 0o755)
	write(t, e.plugin, ours, 0o644)
	return e
}

func (e env) options() Options {
	return Options{BinDir: e.bin, Exe: e.exe, ConfDir: e.conf, PluginConfig: e.plugin, Versions: versions,
		StateDir: e.state, Timeout: 10 * time.Second, Debounce: 20 * time.Millisecond, Log: slog.New(e.log)}
}

// start runs Run until the test ends or stop is called; stop returns Run's
// error.
func start(t *testing.T, o Options) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, o) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// primaryWrites replaces a conflist as a CNI agent does: temporary file,
// rename.
func primaryWrites(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "tmp-agent")
	write(t, tmp, content, 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func hasEntry(path string) bool {
	data, err := os.ReadFile(path)
	return err == nil && NamesPlugin(data)
}

func TestRunOnce(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o600)
	if err := Run(context.Background(), e.options()); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	checkSame(t, conflistOf(calico, portmap, ours), got)
	if identify(t, path).mode != 0o600 {
		t.Errorf("conflist mode %v, want 0600 kept", identify(t, path).mode)
	}
	if b, _ := os.ReadFile(filepath.Join(e.bin, BinaryName)); string(b) != "\x7fELF kube-rdma" {
		t.Errorf("binary %q", b)
	}
}

// Without --watch, Run waits for a conflist, then returns once it chained.
func TestRunWaitsForConflist(t *testing.T) {
	for _, name := range []string{"", "20-named.conflist"} {
		t.Run("conflist="+name, func(t *testing.T) {
			e := newEnv(t)
			o := e.options()
			o.Conflist = name
			done := make(chan error, 1)
			go func() { done <- Run(context.Background(), o) }()
			eventually(t, "the wait to be logged", func() bool { return e.log.count("waiting for a conflist") == 1 })
			write(t, filepath.Join(e.conf, "99-other.conf"), `{"type":"bridge"}`, 0o644)
			path := filepath.Join(e.conf, "20-named.conflist")
			primaryWrites(t, path, conflistOf(calico))
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			checkSame(t, conflistOf(calico, ours), got)
		})
	}
}

func TestRunFails(t *testing.T) {
	tests := []struct {
		name     string
		conflist string // content of 10-a.conflist; "" for none
		plugin   string
		err      error
	}{
		{name: "timeout", plugin: ours},
		{name: "unsupported cniVersion", conflist: `{"cniVersion":"0.2.0","name":"n","plugins":[{"type":"bridge"}]}`, plugin: ours, err: ErrUnsupportedVersion},
		{name: "not a list", conflist: `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, plugin: ours, err: ErrNotList},
		{name: "plugin config with name", conflist: conflistOf(calico), plugin: `{"type":"kube-rdma","name":"rdma"}`, err: ErrBadPlugin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			path := filepath.Join(e.conf, "10-a.conflist")
			if tt.conflist != "" {
				write(t, path, tt.conflist, 0o644)
			}
			write(t, e.plugin, tt.plugin, 0o644)
			o := e.options()
			o.Timeout = 50 * time.Millisecond
			err := Run(context.Background(), o)
			if err == nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("Run = %v, want an error (%v)", err, tt.err)
			}
			if got, _ := os.ReadFile(path); string(got) != tt.conflist {
				t.Errorf("conflist now %s, want it untouched", got)
			}
			var want []string // no temporary left
			if tt.conflist != "" {
				want = []string{"10-a.conflist"}
			}
			if diff := cmp.Diff(want, names(t, e.conf)); diff != "" {
				t.Errorf("conf dir (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Options{BinDir: "b", ConfDir: "c", PluginConfig: "p", Watch: true, RemoveOnExit: true}
	for name, o := range map[string]Options{
		"nothing":                      {},
		"plugin config without dir":    {BinDir: "b", PluginConfig: "p"},
		"watch without dir":            {BinDir: "b", Watch: true},
		"dir without plugin config":    {ConfDir: "c", Watch: true},
		"conflist path":                {ConfDir: "c", PluginConfig: "p", Conflist: "../x.conflist", Watch: true},
		"remove-on-exit without watch": {ConfDir: "c", PluginConfig: "p", RemoveOnExit: true, Timeout: time.Second},
		"no timeout without watch":     {ConfDir: "c", PluginConfig: "p"},
	} {
		if err := o.Validate(); err == nil {
			t.Errorf("%s: %+v valid", name, o)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
}

// The primary CNI rewrites its conflist without the entry: it comes back,
// and our own writes do not wake us into another write.
func TestWatchReapplies(t *testing.T) {
	e := newEnv(t)
	o := e.options()
	o.Watch = true
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico), 0o644)
	start(t, o)
	eventually(t, "the entry", func() bool { return hasEntry(path) })

	for i := range 3 {
		primaryWrites(t, path, conflistOf(portmap, calico))
		eventually(t, "the entry again", func() bool { return hasEntry(path) })
		// The same content again: looked at, not written.
		checked := e.log.count("kube-rdma entry in place")
		data, _ := os.ReadFile(path)
		primaryWrites(t, path, string(data))
		eventually(t, "a look at the unchanged file", func() bool { return e.log.count("kube-rdma entry in place") > checked })
		if n := e.log.count("kube-rdma entry written"); n != i+2 {
			t.Errorf("after %d rewrites the entry was written %d times, want %d", i+1, n, i+2)
		}
	}
	got, _ := os.ReadFile(path)
	checkSame(t, conflistOf(portmap, calico, ours), got)
}

// A conflist that sorts first appears: the entry moves there and leaves the
// old file. The first conflist removed: it goes back.
func TestWatchFollowsFirstConflist(t *testing.T) {
	e := newEnv(t)
	o := e.options()
	o.Watch = true
	old := filepath.Join(e.conf, "20-flannel.conflist")
	write(t, old, conflistOf(calico), 0o644)
	start(t, o)
	eventually(t, "the entry in 20-flannel", func() bool { return hasEntry(old) })

	first := filepath.Join(e.conf, "10-calico.conflist")
	primaryWrites(t, first, conflistOf(portmap))
	eventually(t, "the entry in 10-calico only", func() bool { return hasEntry(first) && !hasEntry(old) })
	got, _ := os.ReadFile(old)
	checkSame(t, conflistOf(calico), got)

	if err := os.Remove(first); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the entry back in 20-flannel", func() bool { return hasEntry(old) })
}

// No conflist at start: the watch waits, then chains into the first one.
func TestWatchWaits(t *testing.T) {
	e := newEnv(t)
	o := e.options()
	o.Watch = true
	start(t, o)
	eventually(t, "the wait to be logged", func() bool { return e.log.count("waiting for a conflist") == 1 })
	path := filepath.Join(e.conf, "10-calico.conflist")
	primaryWrites(t, path, conflistOf(calico))
	eventually(t, "the entry", func() bool { return hasEntry(path) })
}

// When the watch stops: the entry leaves the conflist (which stays), and
// the binary goes too unless a configuration names kube-rdma or a pod of
// this boot is attached.
func TestStop(t *testing.T) {
	record := func(boot string) func(e env) {
		return func(e env) {
			if err := (attachment.Store{Dir: e.state, BootID: boot}).Save(attachment.Attachment{Key: attachment.Key{ContainerID: "c1", IfName: "net1"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name       string
		keepOnExit bool
		noStateDir bool
		setup      func(e env)
		entryKept  bool
		binaryKept bool
	}{
		{name: "nothing needs the binary"},
		{name: "stale record of another boot", setup: record("boot-1")},
		{name: "pod attached", setup: record("boot-2"), binaryKept: true},
		{name: "another conflist names kube-rdma", binaryKept: true, setup: func(e env) {
			write(t, filepath.Join(e.conf, "30-other.conflist"), conflistOf(portmap, ours), 0o644)
		}},
		{name: "multus delegates to a list with kube-rdma", binaryKept: true, setup: func(e env) {
			write(t, filepath.Join(e.conf, "00-multus.conf"), `{"type":"multus","delegates":[`+conflistOf(calico, ours)+`]}`, 0o644)
		}},
		{name: "no state dir to check", noStateDir: true, binaryKept: true},
		{name: "without remove-on-exit", keepOnExit: true, entryKept: true, binaryKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			o := e.options()
			o.Watch, o.RemoveOnExit, o.BootID = true, !tt.keepOnExit, "boot-2"
			if tt.noStateDir {
				o.StateDir = ""
			}
			path := filepath.Join(e.conf, "10-calico.conflist")
			write(t, path, conflistOf(calico, portmap), 0o640)
			if tt.setup != nil {
				tt.setup(e)
			}
			others := names(t, e.conf)
			stop := start(t, o)
			eventually(t, "the entry", func() bool { return hasEntry(path) })
			if err := stop(); err != nil {
				t.Fatalf("Run after cancel = %v, want nil", err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("conflist: %v", err)
			}
			if hasEntry(path) != tt.entryKept {
				t.Errorf("conflist after stop: %s; want entry kept %v", got, tt.entryKept)
			}
			if !tt.entryKept {
				checkSame(t, conflistOf(calico, portmap), got)
				if identify(t, path).mode != 0o640 {
					t.Errorf("conflist mode %v, want 0640", identify(t, path).mode)
				}
			}
			_, err = os.Stat(filepath.Join(e.bin, BinaryName))
			if kept := err == nil; kept != tt.binaryKept {
				t.Errorf("binary kept %v, want %v", kept, tt.binaryKept)
			}
			if diff := cmp.Diff(others, names(t, e.conf)); diff != "" {
				t.Errorf("conf dir (-before +after):\n%s", diff)
			}
		})
	}
}

// TestSurgeUpdate: two cni-chain containers on one node, as a DaemonSet
// update with surge runs them. The old one stops with RemoveOnExit and,
// no pod being attached, takes the entry and the binary out; the new one
// puts both back, the binary first. Before, it put back the entry alone:
// every pod sandbox on the node then failed to find the plugin.
func TestSurgeUpdate(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o644)
	old := e.options()
	old.Watch, old.RemoveOnExit, old.BootID = true, true, "boot-1"
	stopOld := start(t, old)
	eventually(t, "the entry", func() bool { return hasEntry(path) })
	// The new pod's binary (another release: other content).
	newExe := filepath.Join(filepath.Dir(e.exe), "exe-new")
	write(t, newExe, "\x7fELF kube-rdma, the next release", 0o755)
	next := old
	next.Exe = newExe
	stopNew := start(t, next)
	bin := filepath.Join(e.bin, BinaryName)
	eventually(t, "the new binary", func() bool { data, _ := os.ReadFile(bin); return string(data) == "\x7fELF kube-rdma, the next release" })
	if err := stopOld(); err != nil {
		t.Fatalf("old Run after cancel = %v", err)
	}
	eventually(t, "the entry and the new binary back", func() bool {
		data, _ := os.ReadFile(bin)
		return hasEntry(path) && string(data) == "\x7fELF kube-rdma, the next release"
	})
	// Removing the binary behind its back (an old pod's stop that lost the
	// race to the conflist event) brings it back too.
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the binary reinstalled", func() bool { _, err := os.Stat(bin); return err == nil })
	if err := stopNew(); err != nil {
		t.Fatalf("new Run after cancel = %v", err)
	}
	if hasEntry(path) {
		t.Error("the entry is left after the last pod stopped")
	}
}

// With Watch, the node file is written with the binary and comes back when
// it is removed: without it the plugin would fall back to the built-in
// host paths.
func TestWatchKeepsNodeFile(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o644)
	o := e.options()
	o.Watch = true
	o.Node = &netconf.Node{StateDir: e.state, KubeletSocket: "/k/kubelet.sock"}
	start(t, o)
	nodeFile := filepath.Join(e.bin, netconf.NodeFileName)
	read := func() (netconf.Node, error) {
		b, err := os.ReadFile(nodeFile)
		if err != nil {
			return netconf.Node{}, err
		}
		return netconf.ParseNode(b)
	}
	eventually(t, "the entry", func() bool { return hasEntry(path) })
	if n, err := read(); err != nil || n.KubeletSocket != "/k/kubelet.sock" || n.StateDir != e.state {
		t.Fatalf("node file: %+v, %v", n, err)
	}
	if err := os.Remove(nodeFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node file back", func() bool { _, err := read(); return err == nil })
}
