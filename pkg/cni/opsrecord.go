package cni

import (
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// parse reads the command's netconf and notes its pool for the command's
// operation record.
func (p *Plugin) parse(args *skel.CmdArgs) (*netconf.Conf, error) {
	conf, err := netconf.Parse(args.StdinData, p.Node)
	if conf != nil {
		pool := poolOf(conf.ResourceName)
		p.opPool.Store(&pool)
	}
	return conf, err
}

// poolOf is the pool of a resource name (config.Config.ResourceName:
// <prefix>/<pool>); "" for none.
func poolOf(resource string) string {
	if i := strings.LastIndexByte(resource, '/'); i >= 0 {
		return resource[i+1:]
	}
	return resource
}

// recordOp leaves the command's outcome in the node's operations spool
// (package cniops) for the daemon's metrics: one O_APPEND write, no fsync.
// A failure to record is logged and changes nothing else: the command's
// result is out already.
func (p *Plugin) recordOp(command string, e *types.Error, d time.Duration) {
	switch command {
	case "ADD", "DEL", "CHECK", "GC", "STATUS":
	default:
		return
	}
	if p.Node.StateDir == "" {
		return
	}
	r := cniops.Record{Command: command, Duration: d}
	if pool := p.opPool.Load(); pool != nil {
		r.Pool = *pool
	}
	switch {
	case e != nil:
		r.Code = e.Code
	case command == "STATUS":
		// A chained entry's STATUS that told the runtime success although
		// RDMA netlink or the state dir failed (Status).
		r.Code = uint(p.statusDegraded.Load())
	case (command == "DEL" || command == "GC") && p.gaveUp.Load() > 0:
		// Succeeded, but a NIC was given up: the attachment ended without it.
		r.Code = OpCodeGaveUp
	}
	if err := cniops.Append(cniops.Dir(p.Node.StateDir), r); err != nil && p.Log != nil {
		p.Log.Warn("record the operation for the daemon's metrics", "err", err)
	}
	mark("record")
}
