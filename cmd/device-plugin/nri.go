package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/nri"
)

// nriFlags are the `run` flags of the NRI plugin (pkg/nri).
type nriFlags struct {
	enabled bool
	socket  string
}

func (f *nriFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "nri", false, "run the NRI plugin that sets RLIMIT_MEMLOCK of the containers that got our devices (docs/device-plugin.md, \"Locked memory\")")
	fs.StringVar(&f.socket, "nri-socket", nri.DefaultSocket, "the container runtime's NRI socket, for --nri")
}

// startNRI starts the NRI plugin once the daemon is ready and returns a
// function that waits for it to stop after ctx ends. Without --nri, /state
// says so. A runtime without NRI is no error: the plugin reports it and
// retries.
func startNRI(ctx context.Context, cfg runConfig, d *agent.Agent) (wait func(), err error) {
	if !cfg.nri.enabled {
		d.SetNRIReport(func() any { return nri.DisabledReport() })
		return func() {}, nil
	}
	if cfg.nri.socket == "" {
		return nil, fmt.Errorf("run: --nri-socket is empty")
	}
	c := nri.Config{Socket: cfg.nri.socket, Source: d, DevRoot: cfg.plugin.DevRoot, Logger: cfg.Logger,
		FailClosed: cfg.netdevWatch.nriFailClosed, ChainedPool: cfg.nodeState.cniPool,
		SharedNetdev: cfg.nodeState.sharedNetdev()}
	if c.FailClosed {
		// Without --cni-state-dir no pod has an attachment: containers of
		// pools whose pods get netdevs are refused (the CNI plugin is not
		// installed, so none could have them).
		store, ok, err := attachmentStore(cfg)
		if err != nil {
			return nil, err
		}
		if ok {
			c.Records = store
		}
		if cr, ok := draClaims(cfg); ok {
			c.Claims = cr
		}
	}
	p := nri.New(c)
	if err := d.RegisterCollector(p); err != nil {
		return nil, err
	}
	d.SetNRIReport(func() any { return p.Report() })
	return runWhenReady(ctx, d, p.Run), nil
}
