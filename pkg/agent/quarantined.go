package agent

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// quarantined is kube_rdma_device_plugin_quarantined_files{kind}: the
// files the readers of the node's contract files (pkg/hostapi) moved aside
// because they did not decode (internal/quarantine), counted at each
// scrape from the quarantine directories, so a CNI plugin's move, which
// lives for one command, counts too, and the count survives a restart.
// Its kinds are those of Config.QuarantineDirs, plus "pool" (gpuAligned
// pools' pool.json) and "pools" (the node's pools file) in the alloc dir's.
type quarantined struct {
	desc *prometheus.Desc
	// dirs maps a kind to its quarantine directory; match picks a kind's
	// files where two kinds share one.
	dirs []quarantineDir
}

type quarantineDir struct {
	kind, dir string
	match     func(name string) bool
}

func newQuarantined(cfg Config) quarantined {
	q := quarantined{desc: prometheus.NewDesc(ns+"_quarantined_files",
		"Contract files a reader moved aside because they did not decode, by kind (attachment, claim, pool, pools), "+
			"as they are in the quarantine directories now (docs/cni.md, \"Torn records\").", []string{"kind"}, nil)}
	for _, kind := range sortedKeys(cfg.QuarantineDirs) {
		q.dirs = append(q.dirs, quarantineDir{kind: kind, dir: cfg.QuarantineDirs[kind]})
	}
	pools := func(name string) bool { return strings.HasPrefix(name, nodepools.FileName+".") }
	if cfg.AllocDir != "" {
		q.dirs = append(q.dirs, quarantineDir{kind: "pool", dir: filepath.Join(cfg.AllocDir, allocdir.QuarantineDir),
			match: func(name string) bool { return !pools(name) }})
	}
	if cfg.PoolsFile != "" {
		q.dirs = append(q.dirs, quarantineDir{kind: "pools", dir: filepath.Join(filepath.Dir(cfg.PoolsFile), nodepools.QuarantineDir), match: pools})
	}
	return q
}

func (q quarantined) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

// Collect reports each kind's count; a directory that cannot be read (not
// mounted) is a kind with no series.
func (q quarantined) Collect(ch chan<- prometheus.Metric) {
	for _, d := range q.dirs {
		ents, err := os.ReadDir(d.dir)
		if err != nil && !os.IsNotExist(err) {
			continue
		}
		n := 0
		for _, e := range ents {
			if e.Type().IsRegular() && (d.match == nil || d.match(e.Name())) {
				n++
			}
		}
		ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, float64(n), d.kind)
	}
}
