package cniinstall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
)

// Options say what Run installs. Their names follow the install
// subcommand's flags.
type Options struct {
	// BinDir is the CNI bin directory to install the binary into; "" for
	// none.
	BinDir string
	// Node, with BinDir, is written next to the binary as the plugin's
	// node file (its host paths, netconf.Node) once the binary is
	// installed; nil writes none. It goes with the binary (RemoveOnExit,
	// Uninstall) and stays while the binary is kept for a DEL, which reads it.
	Node *netconf.Node
	// Exe is the binary to install; "" is /proc/self/exe.
	Exe string
	// ConfDir is the CNI configuration directory; "" to leave conflists
	// alone.
	ConfDir string
	// Conflist is the conflist's file name in ConfDir; "" is the first
	// *.conflist in lexical order, at each change.
	Conflist string
	// PluginConfig is the file holding the entry to chain (CheckPlugin).
	PluginConfig string
	// Versions are the cniVersions the plugin speaks; a conflist of another
	// is refused.
	Versions []string
	// PoolsFile is the node agent's pools file (package nodepools, in its
	// alloc dir), which Uninstall removes; "" leaves it. The agent, which
	// writes it, removes it too once it sees the uninstall marker, and
	// writes it no more.
	PoolsFile string
	// StateDir and BootID say where the plugin's attachment records are
	// (attachment.Store): RemoveOnExit keeps the binary while a pod is attached.
	StateDir, BootID string
	// Watch keeps the entry in the conflist until ctx is done.
	Watch bool
	// RemoveOnExit, with Watch, takes the entry out when ctx is done, and
	// the binary too (with BinDir) when nothing needs it any more.
	RemoveOnExit bool
	// Timeout bounds the wait for a conflist without Watch.
	Timeout time.Duration
	// Debounce is how long the directory must be quiet after a change
	// before the entry is applied again; 0 is 200ms.
	Debounce time.Duration
	// Log receives what was done; nil discards.
	Log *slog.Logger
}

// Validate checks that the options make sense together.
func (o Options) Validate() error {
	switch {
	case o.BinDir == "" && o.ConfDir == "":
		return errors.New("nothing to install: give --bin-dir, --conf-dir, or both")
	case o.ConfDir == "" && (o.PluginConfig != "" || o.Conflist != "" || o.Watch):
		return errors.New("--plugin-config, --conflist and --watch need --conf-dir")
	case o.ConfDir != "" && o.PluginConfig == "":
		return errors.New("--conf-dir needs --plugin-config")
	case o.Conflist != "" && !plainName(o.Conflist):
		return fmt.Errorf("--conflist %q: want a file name in --conf-dir", o.Conflist)
	case o.RemoveOnExit && !o.Watch:
		return errors.New("--remove-on-exit needs --watch")
	case o.ConfDir != "" && !o.Watch && o.Timeout <= 0:
		return errors.New("--timeout must be positive")
	}
	return nil
}

// Run installs the binary (BinDir), then chains the entry into the
// conflist (ConfDir), waiting for one to appear. Without Watch it returns
// once the entry is there, or an error after Timeout. With Watch it keeps
// the entry, and the binary, there until ctx is done, then (RemoveOnExit)
// takes them out and returns nil.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Exe == "" {
		o.Exe = "/proc/self/exe"
	}
	if o.Debounce <= 0 {
		o.Debounce = 200 * time.Millisecond
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	var plugin []byte
	if o.ConfDir != "" {
		var err error
		if plugin, err = os.ReadFile(o.PluginConfig); err != nil {
			return fmt.Errorf("read plugin config: %w", err)
		}
		if err := CheckPlugin(plugin); err != nil {
			return fmt.Errorf("plugin config %s: %w", o.PluginConfig, err)
		}
	}
	if o.BinDir != "" && !o.Watch {
		// A pod's start: an uninstall marker here is one an interrupted
		// uninstall left (its hook pod never stopped); it must not take
		// this install's entry out.
		if removed, err := ClearUninstall(o.BinDir); err != nil {
			return err
		} else if removed {
			o.Log.Info("stale uninstall marker removed", "path", filepath.Join(o.BinDir, UninstallMarkerName))
		}
	}
	if o.BinDir != "" {
		changed, err := InstallBinary(o.Exe, o.BinDir)
		if err != nil {
			return err
		}
		o.Log.Info("binary installed", "path", filepath.Join(o.BinDir, BinaryName), "copied", changed)
	}
	// After the binary: a new binary reads the previous node file, an old
	// one might refuse a newer.
	if o.BinDir != "" && o.Node != nil {
		changed, err := WriteNodeFile(o.BinDir, *o.Node)
		if err != nil {
			return err
		}
		o.Log.Info("node file written", "path", filepath.Join(o.BinDir, netconf.NodeFileName), "changed", changed)
	}

	if o.ConfDir == "" {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", o.ConfDir, err)
	}
	defer func() { _ = w.Close() }()
	// Watch before the first look, so no change after it is missed.
	if err := w.Add(o.ConfDir); err != nil {
		return fmt.Errorf("watch %s: %w", o.ConfDir, err)
	}
	// With Watch, the binary is kept as well as the entry: during a DaemonSet
	// update with surge, the old pod's stop (RemoveOnExit) takes both out
	// while the new pod watches; the entry comes back on the conflist's
	// change, and the binary on this directory's.
	if o.Watch && o.BinDir != "" {
		if err := w.Add(o.BinDir); err != nil {
			return fmt.Errorf("watch %s: %w", o.BinDir, err)
		}
	}
	c := &chainer{Options: o, plugin: plugin, w: w}
	return c.run(ctx)
}
