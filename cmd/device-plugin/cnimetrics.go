package main

import (
	"context"
	"flag"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/cnimetrics"
	"github.com/kube-rdma/kube-rdma/pkg/netdevwatch"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
)

// cniMetricsFlags is the `run` flag of the CNI plugin's operation metrics
// (pkg/cnimetrics).
type cniMetricsFlags struct {
	dir string
}

func (f *cniMetricsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dir, "cni-metrics-dir", "", "the kube-rdma CNI plugin's operations spool (<its state dir>/metrics), drained every few seconds into kube_rdma_cni_* series on /metrics, and its NICs given up by DEL or GC logged and posted as Events on their pods (read and emptied: the daemon needs write access); empty: off")
}

// startCNIMetrics registers the spool's collector on /metrics and drains it
// until ctx ends, posting the give-ups it reads as Events on their pods when
// the daemon has an API server; it returns the collector, whose recent
// give-ups the node state publishes (nil without --cni-metrics-dir), and a
// function that waits for the last drain (and the last Event's send).
func startCNIMetrics(ctx context.Context, cfg runConfig, a apiConn, d *agent.Agent) (giveUps nodestate.GiveUps, wait func(), err error) {
	if cfg.cniMetrics.dir == "" {
		return nil, func() {}, nil
	}
	cc := cnimetrics.Config{Dir: cfg.cniMetrics.dir, Logger: cfg.Logger}
	stop := func() {}
	if a.err == nil && a.clients != nil {
		k := netdevwatch.NewKube(a.clients.kube, cfg.NodeName)
		cc.Events, stop = k, k.Stop
	}
	c := cnimetrics.New(cc)
	if err := d.RegisterCollector(c); err != nil {
		stop()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	return c, func() { <-done; stop() }, nil
}
