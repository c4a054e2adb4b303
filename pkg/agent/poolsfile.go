package agent

import (
	"bytes"
	"log/slog"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// poolsFile keeps the node's pools file (package nodepools, --pools-file)
// equal to the pools the daemon serves and their members, for the CNI
// plugin's "deviceID in no pool" refusal. It runs on the Run goroutine only.
type poolsFile struct {
	last   []byte
	failed bool
}

// update rewrites the file at path when the members changed (or the last
// write failed) and its content differs; "" writes nothing. pools are the
// assignments of every front end; a refused pool is left out. A failed write
// is logged and tried again with the next snapshot.
func (w *poolsFile) update(path string, members bool, log *slog.Logger, c config.Config,
	pools map[config.Frontend][]Assignment) {
	if path == "" || !members && !w.failed {
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
		np := nodepools.Pool{Name: p.Name, Mode: string(p.Mode), Frontend: string(frontendOf(p))}
		for _, d := range a.Members {
			np.Devices = append(np.Devices, nodepools.Device{RDMA: d.Name, PCIAddress: d.PCIAddress})
		}
		f.Pools = append(f.Pools, np)
	}
	data, err := f.Marshal()
	if err == nil && bytes.Equal(data, w.last) {
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
	w.last = data
}
