package cniinstall

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// UninstallMarkerName is the file in the CNI bin directory that says the
// chart is being uninstalled (docs/cni.md, Installing). While it is there a
// watching installer keeps the entry out of the conflist and the binary out
// of the bin directory (when nothing needs it) instead of putting them back;
// a DaemonSet restart or upgrade never writes it, so the entry and the
// binary stay across those and pods created meanwhile still get their NIC.
// `kube-rdma uninstall` writes it (the chart's pre-delete hook) and removes
// it when it stops; an install at pod start (Run without Watch) removes one
// an interrupted uninstall left.
const UninstallMarkerName = "kube-rdma.uninstall"

// MarkUninstall writes the uninstall marker into binDir (fsynced, renamed
// into place).
func MarkUninstall(binDir string) error {
	path := filepath.Join(binDir, UninstallMarkerName)
	err := atomicfile.WriteSynced(path, 0o644, "."+UninstallMarkerName+".*", func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "{\"requested\":%q}\n", time.Now().UTC().Format(time.RFC3339))
		return err
	})
	if err != nil {
		return fmt.Errorf("write uninstall marker: %w", err)
	}
	return nil
}

// ClearUninstall removes the uninstall marker from binDir, if there is one.
func ClearUninstall(binDir string) (removed bool, err error) {
	err = os.Remove(filepath.Join(binDir, UninstallMarkerName))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("remove uninstall marker: %w", err)
}

// Uninstalling reports whether binDir holds the uninstall marker.
func Uninstalling(binDir string) (bool, error) {
	if binDir == "" {
		return false, nil
	}
	_, err := os.Lstat(filepath.Join(binDir, UninstallMarkerName))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("look for the uninstall marker: %w", err)
}

// Uninstall undoes Run on a node: it writes the uninstall marker (with
// BinDir, so that a watching installer does not put anything back), takes
// the kube-rdma entry out of every conflist in ConfDir, then removes the
// binary and its node file from BinDir unless a network configuration still
// names kube-rdma or a pod is attached (its DEL needs them), and the node
// agent's pools file (PoolsFile; a DEL does not read it). It is
// idempotent. The marker stays: `kube-rdma uninstall --hold` removes it
// when it stops.
func Uninstall(o Options) error {
	if o.BinDir == "" && o.ConfDir == "" {
		return errors.New("nothing to uninstall: give --bin-dir, --conf-dir, or both")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.BinDir != "" {
		if err := MarkUninstall(o.BinDir); err != nil {
			return err
		}
	}
	c := &chainer{Options: o}
	if o.ConfDir != "" {
		if err := c.unchainAll(); err != nil {
			return err
		}
	}
	if err := removePoolsFile(o.PoolsFile); err != nil {
		return err
	}
	if o.BinDir == "" {
		return nil
	}
	return c.removeBinary()
}

// removePoolsFile removes the node agent's pools file and its lent-devices
// file beside it; "" or files not there is fine.
func removePoolsFile(path string) error {
	if path == "" {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the node's pools file: %w", err)
	}
	if err := os.Remove(nodepools.LentPath(path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the node agent's lent-devices file: %w", err)
	}
	return nil
}

// unchainAll takes the entry out of every conflist in ConfDir that holds it.
func (c *chainer) unchainAll() error {
	ents, err := os.ReadDir(c.ConfDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", c.ConfDir, err)
	}
	for _, e := range ents {
		if e.IsDir() || filepath.Ext(e.Name()) != ".conflist" {
			continue
		}
		if err := c.unchain(e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// removeNodeFile removes the node file next to a removed binary.
func (c *chainer) removeNodeFile() error {
	err := os.Remove(filepath.Join(c.BinDir, netconf.NodeFileName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove node file: %w", err)
	}
	return nil
}
