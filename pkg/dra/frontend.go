package dra

import (
	"context"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

var (
	_ agent.FrontEnd    = (*Driver)(nil)
	_ agent.PoolRefuser = (*Driver)(nil)
)

// Start implements agent.FrontEnd: StartDriver has registered the driver
// with the kubelet already, so that its claims' records are there before
// the agent's first scan; what is left is the node's NUMA node count, for
// the devices' closest GPUs in the claims' metadata.
func (d *Driver) Start(_ context.Context, n agent.Node) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.numa = n.NUMANodes
	return nil
}

// Update implements agent.FrontEnd: it publishes the served pools (every
// configured dra pool the agent does not refuse; one without members is
// there, empty) with the node's health, on every snapshot (a health change
// is a taint change).
func (d *Driver) Update(u agent.Update) error {
	pools := map[string][]discovery.RDMADevice{}
	opts := map[string]PoolOptions{}
	for _, a := range u.Pools {
		if a.Refused != "" {
			continue
		}
		pools[a.Pool.Name] = append([]discovery.RDMADevice{}, a.Members...)
		o := PoolOptions{NoNCCL: !a.Pool.SetsNCCL(), Memlock: a.Pool.MemlockLimit()}
		if a.Pool.Mode == config.Shared {
			o.Shares = a.Pool.SlotCount()
		}
		opts[a.Pool.Name] = o
	}
	d.mu.Lock()
	d.gpus = u.GPUs
	d.mu.Unlock()
	return d.Publish(pools, opts, u.Healthy)
}

// Status implements agent.FrontEnd: nil, the devices reach the kubelet as
// ResourceSlices; the agent reports the dra pools' members and health on
// /state itself.
func (d *Driver) Status() []agent.PoolStatus { return nil }

var _ agent.FileKeeper = (*Driver)(nil)

// RestoreFiles implements agent.FileKeeper: the record of a prepared claim
// that a reader moved aside (torn) is written again from the driver's
// memory (Preparer.Restore).
func (d *Driver) RestoreFiles() { d.prep.Restore() }
