package cniinstall

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// chainer keeps the entry in the conflist Run was asked for.
type chainer struct {
	Options
	plugin []byte
	w      *fsnotify.Watcher
	// target is the conflist that holds the entry, "" while there is none.
	target  string
	waiting bool // the wait for a conflist was logged
	// uninstalled: the uninstall marker was seen. It stays so for the
	// rest of this process (`kube-rdma uninstall --hold` removes the marker
	// when the hook ends, before the DaemonSet is deleted), so nothing is
	// put back in between; a new pod chains again.
	uninstalled bool
}

// uninstalling keeps the entry and the binary out while the uninstall marker
// is there (UninstallMarkerName): it takes the entry out of every conflist
// and the binary out when nothing needs it, and puts nothing back.
func (c *chainer) uninstalling() error {
	c.Log.Info("uninstall requested (marker seen): the kube-rdma entry and binary stay out until this pod is replaced",
		"marker", filepath.Join(c.BinDir, UninstallMarkerName))
	if err := c.unchainAll(); err != nil {
		return err
	}
	c.target = ""
	if c.BinDir == "" {
		return nil
	}
	return c.removeBinary()
}

func (c *chainer) run(ctx context.Context) error {
	var timeout <-chan time.Time
	if !c.Watch {
		t := time.NewTimer(c.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	for first := true; ; first = false {
		err := c.apply()
		switch {
		case err != nil && (first || !c.Watch):
			return err
		case err != nil: // tried again at the next change
			c.Log.Error("keep the conflist entry", "err", err)
		case c.target != "" && !c.Watch:
			return nil
		}
		if err := c.settle(ctx, timeout); err != nil {
			if ctx.Err() != nil && c.Watch {
				return c.stop()
			}
			return err
		}
	}
}

// apply puts the entry into the conflist that should hold it now, and
// takes it out of the one that held it before when that is another.
func (c *chainer) apply() error {
	if c.Watch && !c.uninstalled {
		un, err := Uninstalling(c.BinDir)
		if err != nil {
			return err
		}
		c.uninstalled = un
	}
	if c.uninstalled {
		return c.uninstalling()
	}
	// The binary before the entry: a runtime that sees the entry execs it.
	// Run installed it before the first apply; with Watch it may have been
	// removed since (an older pod's stop during an update with surge).
	if c.Watch && c.BinDir != "" {
		copied, err := InstallBinary(c.Exe, c.BinDir)
		if err != nil {
			return err
		}
		if copied {
			c.Log.Info("binary installed again", "path", filepath.Join(c.BinDir, BinaryName))
		}
		if c.Node != nil {
			if _, err := WriteNodeFile(c.BinDir, *c.Node); err != nil {
				return err
			}
		}
	}
	target, err := c.resolve()
	if err != nil {
		return err
	}
	if c.target != "" && target != c.target {
		if err := c.unchain(c.target); err != nil {
			return err
		}
		c.Log.Info("kube-rdma entry moved", "from", c.target, "to", target)
	}
	c.target = target
	if target == "" {
		if !c.waiting {
			c.Log.Info("waiting for a conflist", "dir", c.ConfDir, "conflist", c.Conflist)
		}
		c.waiting = true
		return nil
	}
	c.waiting = false
	path := filepath.Join(c.ConfDir, target)
	changed, err := editFile(path, func(b []byte) ([]byte, bool, error) { return Chain(b, c.plugin, c.Versions) })
	if errors.Is(err, fs.ErrNotExist) { // removed since resolve: the next event says what next
		c.target = ""
		return nil
	}
	if err != nil {
		return fmt.Errorf("chain kube-rdma into %s: %w", path, err)
	}
	if changed {
		c.Log.Info("kube-rdma entry written", "conflist", path)
	} else {
		c.Log.Debug("kube-rdma entry in place", "conflist", path)
	}
	return nil
}

// resolve returns the conflist that should hold the entry, "" when there is
// none (yet).
func (c *chainer) resolve() (string, error) {
	if c.Conflist != "" {
		_, err := os.Stat(filepath.Join(c.ConfDir, c.Conflist))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", nil
		case err != nil:
			return "", fmt.Errorf("find conflist: %w", err)
		}
		return c.Conflist, nil
	}
	name, err := FirstConflist(c.ConfDir)
	if errors.Is(err, ErrNoConflist) {
		return "", nil
	}
	return name, err
}

// unchain takes the entry out of name, if it is still there.
func (c *chainer) unchain(name string) error {
	path := filepath.Join(c.ConfDir, name)
	changed, err := editFile(path, Unchain)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrNotList) {
		return nil // gone, or rewritten into something that cannot hold the entry
	}
	if err != nil {
		return fmt.Errorf("remove kube-rdma from %s: %w", path, err)
	}
	if changed {
		c.Log.Info("kube-rdma entry removed", "conflist", path)
	}
	return nil
}

// settle waits for a change to a conflist that may matter, then for the
// directory to be quiet for Debounce. timeout is nil with Watch.
func (c *chainer) settle(ctx context.Context, timeout <-chan time.Time) error {
	var quiet <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for a conflist in %s: %w", c.ConfDir, ctx.Err())
		case <-timeout:
			if c.Conflist != "" {
				return fmt.Errorf("no conflist %s in %s after %s", c.Conflist, c.ConfDir, c.Timeout)
			}
			return fmt.Errorf("no *.conflist in %s after %s", c.ConfDir, c.Timeout)
		case <-quiet:
			return nil
		case ev, ok := <-c.w.Events:
			if !ok {
				return fmt.Errorf("watch %s: closed", c.ConfDir)
			}
			if filepath.Clean(ev.Name) == filepath.Clean(c.ConfDir) && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return fmt.Errorf("watch %s: the directory was removed", c.ConfDir)
			}
			if c.matters(ev) {
				quiet = time.After(c.Debounce)
			}
		case err, ok := <-c.w.Errors:
			if !ok {
				return fmt.Errorf("watch %s: closed", c.ConfDir)
			}
			c.Log.Warn("watch", "dir", c.ConfDir, "err", err) // e.g. an overflow: look again
			quiet = time.After(c.Debounce)
		}
	}
}

// matters reports whether ev may change which conflist holds the entry or
// what it holds: a change to a *.conflist (to the named one with Conflist);
// or the installed binary removed or renamed away.
// Our own temporary files (.<name>.<random>) do not match.
func (c *chainer) matters(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	base := filepath.Base(ev.Name)
	if c.BinDir != "" && filepath.Clean(filepath.Dir(ev.Name)) == filepath.Clean(c.BinDir) &&
		filepath.Clean(c.BinDir) != filepath.Clean(c.ConfDir) {
		if base == UninstallMarkerName {
			return ev.Has(fsnotify.Create | fsnotify.Write | fsnotify.Remove | fsnotify.Rename)
		}
		return (base == BinaryName || base == netconf.NodeFileName) && ev.Has(fsnotify.Remove|fsnotify.Rename)
	}
	if c.Conflist != "" {
		return base == c.Conflist
	}
	return filepath.Ext(base) == ".conflist"
}

// stop ends a watch: with RemoveOnExit it takes the entry out, then
// removes the binary when nothing needs it.
func (c *chainer) stop() error {
	if !c.RemoveOnExit {
		c.Log.Info("stopped, kube-rdma entry left in place", "conflist", c.target)
		return nil
	}
	if c.target != "" {
		if err := c.unchain(c.target); err != nil {
			return err
		}
	}
	if c.BinDir == "" {
		return nil
	}
	return c.removeBinary()
}

// removeBinary removes the installed binary unless a network configuration
// still names kube-rdma or a pod is still attached (its DEL needs the
// binary). Without a state directory it cannot tell, and keeps it.
func (c *chainer) removeBinary() error {
	bin := filepath.Join(c.BinDir, BinaryName)
	if _, err := os.Lstat(bin); errors.Is(err, fs.ErrNotExist) {
		return c.removeNodeFile()
	}
	if c.StateDir == "" {
		c.Log.Info("binary kept: no state directory to check for attached pods", "path", bin)
		return nil
	}
	name, err := confNamesPlugin(c.ConfDir)
	if err != nil {
		return fmt.Errorf("check %s before removing the binary: %w", c.ConfDir, err)
	}
	if name != "" {
		c.Log.Info("binary kept: a network configuration names kube-rdma", "path", bin, "conf", name)
		return nil
	}
	attached, err := attachment.Store{Dir: c.StateDir, BootID: c.BootID}.HasRecords()
	if err != nil {
		return fmt.Errorf("check %s before removing the binary: %w", c.StateDir, err)
	}
	if attached {
		c.Log.Info("binary kept: pods are attached", "path", bin, "stateDir", c.StateDir)
		return nil
	}
	if err := os.Remove(bin); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove binary: %w", err)
	}
	if err := c.removeNodeFile(); err != nil {
		return err
	}
	c.Log.Info("binary and node file removed", "path", bin)
	return nil
}
