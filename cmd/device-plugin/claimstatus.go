package main

import (
	"context"
	"fmt"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/claimstatus"
)

// startClaimStatus starts the writer of the DRA claims' network status
// (pkg/claimstatus) once the daemon is ready: with --dra and
// --dra-claim-status, a chained pool (--cni-chained-pool; the writer
// itself tells whether it is a pool of frontend dra, from the agent's
// view) and the CNI plugin's records (--cni-state-dir). The returned
// function waits for it to stop.
func startClaimStatus(ctx context.Context, cfg runConfig, a apiConn, d *agent.Agent) (wait func(), err error) {
	claims, ok := draClaims(cfg)
	if !ok || !cfg.dra.claimStatus || cfg.nodeState.cniPool == "" {
		return func() {}, nil
	}
	store, ok, err := attachmentStore(cfg)
	if err != nil || !ok {
		return func() {}, err
	}
	if a.err != nil {
		return nil, fmt.Errorf("run: --dra-claim-status: %w", a.err)
	}
	w := claimstatus.New(claimstatus.Config{Source: d, Claims: claims, Records: store, ChainedPool: cfg.nodeState.cniPool,
		Client: claimstatus.NewKube(a.clients.kube, cfg.NodeName), Logger: cfg.Logger})
	if err := d.RegisterCollector(w); err != nil {
		return nil, err
	}
	return runWhenReady(ctx, d, w.Run), nil
}
