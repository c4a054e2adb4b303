package agent

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// poolsFile keeps the node's pools file (package nodepools, --pools-file)
// equal to the pools the daemon serves and their members, for the CNI
// plugin's "deviceID in no pool" refusal. It runs on the Run goroutine only.
type poolsFile struct {
	last   []byte
	failed bool
	// withdrawn: the chart is being uninstalled (Config.Uninstalling); the
	// file is removed (failed: not yet) and written no more by this process.
	withdrawn bool
}

// DefaultFilesInterval is how often the files the CNI plugin reads are
// checked for being there (Config.FilesInterval).
const DefaultFilesInterval = 10 * time.Second

// restoreFiles writes the pools file and the front ends' files again where
// a reader moved a torn one aside (Config.FilesInterval).
func (d *Agent) restoreFiles() {
	d.poolsFile.update(d.cfg.PoolsFile, false, d.cfg.Uninstalling, d.log, d.conf, d.pools)
	if d.poolsFile.withdrawn {
		d.lent.withdraw()
	}
	for _, name := range sortedKeys(d.cfg.FrontEnds) {
		if k, ok := d.cfg.FrontEnds[name].(FileKeeper); ok {
			k.RestoreFiles()
		}
	}
}

// update rewrites the file at path when the members changed (or the last
// write failed, or the file written is gone: the CNI plugin moves a torn
// one aside) and its content differs or it is gone; "" writes nothing. pools are the
// assignments of every front end; a refused pool is left out. A failed write
// is logged and tried again with the next snapshot. Once uninstalling
// says so, the file is removed instead, and nothing is written any more.
func (w *poolsFile) update(path string, members bool, uninstalling func() bool, log *slog.Logger, c config.Config,
	pools map[config.Frontend][]Assignment) {
	if path == "" || w.withdraw(path, uninstalling, log) {
		return
	}
	gone := w.gone(path)
	if path == "" || !members && !w.failed && !gone {
		return
	}
	byName := map[string]Assignment{}
	for _, as := range pools {
		for _, a := range as {
			byName[a.Pool.Name] = a
		}
	}
	var f nodepools.File
	for _, p := range c.Pools { // the config's order
		a, ok := byName[p.Name]
		if !ok || a.Refused != "" {
			continue
		}
		np := nodepools.Pool{Name: p.Name, Mode: string(p.Mode), Frontend: string(frontendOf(p)), AllowConfiguredNetdevs: p.AllowConfiguredNetdevs}
		for _, d := range a.Members {
			np.Devices = append(np.Devices, nodepools.Device{RDMA: d.Name, PCIAddress: d.PCIAddress})
		}
		f.Pools = append(f.Pools, np)
	}
	data, err := f.Marshal()
	if err == nil && bytes.Equal(data, w.last) && !gone {
		w.failed = false
		return
	}
	if err == nil {
		err = nodepools.Write(path, data)
	}
	if w.failed = err != nil; w.failed {
		log.Warn("write the node's pools file", "path", path, "err", err)
		return
	}
	if gone {
		log.Info("the node's pools file was missing (moved aside?); written again", "path", path)
	}
	w.last = data
}

// withdraw reports whether the file is withdrawn: the chart is being
// uninstalled. On the first such answer it removes the file, once (again
// only while that fails): every write of this process came before, on this
// goroutine, and a file there later is another process's (the next pod of
// an uninstall given up).
func (w *poolsFile) withdraw(path string, uninstalling func() bool, log *slog.Logger) bool {
	if !w.withdrawn && (uninstalling == nil || !uninstalling()) {
		return false
	}
	if !w.withdrawn {
		log.Info("the chart is being uninstalled (uninstall marker); removing the node's pools file and writing it no more", "path", path)
		w.withdrawn, w.failed = true, true
	}
	if !w.failed {
		return true
	}
	err := os.Remove(path)
	if w.failed = err != nil && !errors.Is(err, fs.ErrNotExist); w.failed {
		log.Warn("remove the node's pools file", "path", path, "err", err)
	}
	return true
}

// gone reports whether the file written last is no longer at path.
func (w *poolsFile) gone(path string) bool {
	if path == "" || w.last == nil {
		return false
	}
	_, err := os.Stat(path)
	return errors.Is(err, fs.ErrNotExist)
}
