package cniinstall

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestRestartKeepsEntry: a watching installer stopped without the
// uninstall marker (a DaemonSet restart or upgrade: what the chart runs now,
// without RemoveOnExit) leaves the entry, the binary and the node file, so a
// pod sandbox created before the next pod is up still runs the plugin.
// Before, the chart's --remove-on-exit took them out on every stop.
func TestRestartKeepsEntry(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o644)
	o := e.options()
	o.Watch = true
	o.Node = &netconf.Node{StateDir: e.state}
	stop := start(t, o)
	eventually(t, "the entry", func() bool { return hasEntry(path) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !hasEntry(path) {
		t.Error("the entry is gone after a stop without the uninstall marker")
	}
	for _, f := range []string{BinaryName, netconf.NodeFileName} {
		if _, err := os.Stat(filepath.Join(e.bin, f)); err != nil {
			t.Errorf("%s after a stop without the marker: %v", f, err)
		}
	}
}

// TestUninstallMarker: the chart's pre-delete hook writes the marker while
// the DaemonSet's installer still watches. The installer takes the entry
// out of every conflist and the binary and node file out (nothing is
// attached), and puts nothing back: not on the conflist's next rewrite by
// the primary plugin, not when the hook removes the marker before the
// DaemonSet is deleted. Stopped afterwards, it leaves the node as before.
func TestUninstallMarker(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o644)
	o := e.options()
	o.Watch = true
	o.Node = &netconf.Node{StateDir: e.state}
	stop := start(t, o)
	eventually(t, "the entry", func() bool { return hasEntry(path) })
	other := filepath.Join(e.conf, "20-other.conflist") // an entry an older release left
	write(t, other, conflistOf(portmap, ours), 0o644)

	if err := Uninstall(Options{BinDir: e.bin, ConfDir: e.conf, StateDir: e.state}); err != nil {
		t.Fatal(err)
	}
	gone := func() bool {
		_, errBin := os.Stat(filepath.Join(e.bin, BinaryName))
		_, errNode := os.Stat(filepath.Join(e.bin, netconf.NodeFileName))
		return !hasEntry(path) && !hasEntry(other) && os.IsNotExist(errBin) && os.IsNotExist(errNode)
	}
	if !gone() {
		t.Fatal("Uninstall left the entry, the binary or the node file")
	}
	eventually(t, "the installer to see the marker", func() bool {
		return e.log.count("uninstall requested (marker seen): the kube-rdma entry and binary stay out until this pod is replaced") > 0
	})
	primaryWrites(t, path, conflistOf(calico, portmap)) // the primary plugin rewrites its conflist
	if removed, err := ClearUninstall(e.bin); err != nil || !removed {
		t.Fatalf("ClearUninstall = %v, %v", removed, err)
	}
	time.Sleep(10 * o.Debounce) // the events of both changes are handled
	if !gone() {
		t.Error("the installer put the entry or the binary back after the marker")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkSame(t, conflistOf(calico, portmap), read(t, path))
	if diff := names(t, e.bin); len(diff) != 0 {
		t.Errorf("bin dir after uninstall: %v, want empty", diff)
	}
}

// TestUninstallKeepsBinaryForAttachedPods: with a pod attached (its DEL
// execs the binary and reads the node file) Uninstall takes the entry out
// and keeps both.
func TestUninstallKeepsBinaryForAttachedPods(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, ours), 0o644)
	write(t, filepath.Join(e.bin, BinaryName), "\x7fELF", 0o755)
	write(t, filepath.Join(e.bin, netconf.NodeFileName), "{}", 0o644)
	if err := (attachment.Store{Dir: e.state, BootID: "b"}).Save(attachment.Attachment{Key: attachment.Key{ContainerID: "c1", IfName: "net1"}}); err != nil {
		t.Fatal(err)
	}
	if err := Uninstall(Options{BinDir: e.bin, ConfDir: e.conf, StateDir: e.state, BootID: "b"}); err != nil {
		t.Fatal(err)
	}
	if hasEntry(path) {
		t.Error("entry left")
	}
	for _, f := range []string{BinaryName, netconf.NodeFileName, UninstallMarkerName} {
		if _, err := os.Stat(filepath.Join(e.bin, f)); err != nil {
			t.Errorf("%s: %v, want kept", f, err)
		}
	}
}

// TestUninstallRemovesPoolsFile: Uninstall removes the node agent's pools
// file (PoolsFile) and its lent-devices file beside it with the rest, whether the binary goes or stays for an
// attached pod (a DEL does not read it), and again without error when it is
// gone; without PoolsFile it is left.
func TestUninstallRemovesPoolsFile(t *testing.T) {
	for _, attached := range []bool{false, true} {
		e := newEnv(t)
		pools := nodepools.Path(filepath.Join(t.TempDir(), "alloc"))
		if err := nodepools.Write(pools, []byte(`{"version":1,"pools":[]}`)); err != nil {
			t.Fatal(err)
		}
		lent := nodepools.LentPath(pools)
		if err := os.WriteFile(lent, []byte(`{"version":1,"devices":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if attached {
			if err := (attachment.Store{Dir: e.state, BootID: "b"}).Save(attachment.Attachment{Key: attachment.Key{ContainerID: "c1", IfName: "net1"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := Uninstall(Options{BinDir: e.bin, ConfDir: e.conf, StateDir: e.state, BootID: "b"}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(pools); err != nil {
			t.Errorf("attached %v: pools file without PoolsFile: %v, want left", attached, err)
		}
		for range 2 { // idempotent
			if err := Uninstall(Options{BinDir: e.bin, ConfDir: e.conf, StateDir: e.state, BootID: "b", PoolsFile: pools}); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(pools); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("attached %v: pools file after Uninstall: %v, want removed", attached, err)
			}
			if _, err := os.Stat(lent); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("attached %v: lent-devices file after Uninstall: %v, want removed", attached, err)
			}
		}
	}
}

// TestInstallClearsStaleMarker: a pod's install (Run without Watch) removes
// a marker an interrupted uninstall left, so the new pod's installer chains.
func TestInstallClearsStaleMarker(t *testing.T) {
	e := newEnv(t)
	path := filepath.Join(e.conf, "10-calico.conflist")
	write(t, path, conflistOf(calico, portmap), 0o644)
	if err := MarkUninstall(e.bin); err != nil {
		t.Fatal(err)
	}
	o := e.options()
	o.ConfDir, o.PluginConfig = "", "" // install-cni without chaining
	if err := Run(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	if un, err := Uninstalling(e.bin); err != nil || un {
		t.Fatalf("Uninstalling after an install = %v, %v; want false", un, err)
	}
	w := e.options()
	w.Watch = true
	start(t, w)
	eventually(t, "the entry", func() bool { return hasEntry(path) })
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
