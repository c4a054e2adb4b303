package nri

import (
	"context"
	"errors"
	"net"
	"syscall"
	"time"
)

// One instance registered at a time. During a DaemonSet update the new pod
// runs beside the old one (maxSurge 1) for seconds. With both plugins
// registered, the runtime refuses every container both adjust ("plugins
// "10-kube-rdma-memlock" and "10-kube-rdma-memlock" both tried to set
// Rlimits RLIMIT_MEMLOCK"); the kubelet retries, and in the local-node e2e's
// upgrade phase such pods started up to ~15 s late instead of 2-4 s. So an
// instance registers only while it holds a lock: an abstract unix socket
// named after the runtime's socket and the plugin (the daemon runs in the
// host network namespace, where both pods see the same name). The kernel
// frees the name when its holder closes it or dies, so no file is left on
// the node and a crashed holder frees it too. A waiting instance tries
// again every turnPoll: the gap in which no instance is registered is that
// long at most after the old one stops (its containers created then get no
// limit), against seconds of refused containers before.

// turnPoll is how often a waiting instance tries to take the lock.
const turnPoll = 100 * time.Millisecond

// lockName is the abstract socket name of the lock for a runtime socket.
func lockName(socket string) string {
	return "@kube-rdma-nri/" + PluginIndex + "-" + PluginName + socket
}

// waitTurn takes the lock, waiting while another instance holds it. It
// returns the release function, or ctx's error.
func (p *Plugin) waitTurn(ctx context.Context) (func(), error) {
	name := lockName(p.cfg.Socket)
	said := false
	for {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err == nil {
			if said {
				p.log.Info("the other instance of the NRI plugin stopped; registering")
			}
			return func() { _ = l.Close() }, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			// No abstract sockets here (not Linux): nothing to hand over.
			p.log.Debug("NRI handover lock unavailable; registering anyway", "err", err)
			return func() {}, nil
		}
		if !said {
			reason := "another instance of this NRI plugin is registered (the DaemonSet's other pod, during an update); registering when it stops"
			p.setDown(reason)
			p.log.Info(reason)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(turnPoll):
		}
	}
}
