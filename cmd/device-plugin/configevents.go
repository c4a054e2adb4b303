package main

import (
	"context"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/netdevwatch"
)

// startConfigEvents posts the pools' configuration problems as Warning
// Events on the node (netdevwatch.PostConfigProblems) once the daemon is
// ready, when it has an API server; the returned function waits for it to
// stop.
func startConfigEvents(ctx context.Context, cfg runConfig, a apiConn, d *agent.Agent) (wait func()) {
	if a.err != nil || a.clients == nil {
		return func() {}
	}
	k := netdevwatch.NewKube(a.clients.kube, cfg.NodeName)
	w := runWhenReady(ctx, d, func(ctx context.Context) error {
		netdevwatch.PostConfigProblems(ctx, d, k)
		return nil
	})
	return func() { w(); k.Stop() }
}
