package main

import (
	"context"
	"flag"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/cnimetrics"
)

// cniMetricsFlags is the `run` flag of the CNI plugin's operation metrics
// (pkg/cnimetrics).
type cniMetricsFlags struct {
	dir string
}

func (f *cniMetricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "cni-metrics-dir", "", "the kube-rdma CNI plugin's operations spool (<its state dir>/metrics), drained every few seconds into kube_rdma_cni_* series on /metrics (read and emptied: the daemon needs write access); empty: off")
}

// startCNIMetrics registers the spool's collector on /metrics and drains it
// until ctx ends; it returns a function that waits for the last drain.
func startCNIMetrics(ctx context.Context, cfg runConfig, d *agent.Agent) (wait func(), err error) {
	if cfg.cniMetrics.dir == "" {
		return func() {}, nil
	}
	c := cnimetrics.New(cnimetrics.Config{Dir: cfg.cniMetrics.dir, Logger: cfg.Logger})
	if err := d.RegisterCollector(c); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	return func() { <-done }, nil
}
