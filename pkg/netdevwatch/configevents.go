package netdevwatch

import (
	"context"
	"slices"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
)

// ReasonConfigProblem is the reason of the Warning Event on the node for a
// configuration problem of the daemon's pools (agent.View.ConfigErrors: an
// overlap, a shared pool in exclusive netns mode, several pools setting
// NCCL's variables with devices on the node, a rejected reload).
const ReasonConfigProblem = "RDMAConfigProblem"

// maxEventMessage bounds an Event's message (the API server refuses one of
// more than 1 KiB in events.k8s.io/v1; core/v1 Events are cut to it here
// too, so that the same text shows in both).
const maxEventMessage = 1024

// NodePoster posts a Warning Event on the daemon's node. *Kube implements
// it.
type NodePoster interface {
	WarnNode(reason, message string)
}

// ViewSource is the agent's view and its change channel (*agent.Agent).
type ViewSource interface {
	View() (agent.View, <-chan struct{})
}

// PostConfigProblems posts a Warning Event ReasonConfigProblem on the node
// for each configuration problem of the view that the previous view did not
// have, at start and at every change of the view, until ctx ends. A problem
// that stays is posted once per daemon start; the node state and
// `kubectl rdma doctor` show it all along.
func PostConfigProblems(ctx context.Context, src ViewSource, events NodePoster) {
	var posted []string
	for {
		v, changed := src.View()
		for _, p := range v.ConfigErrors {
			if !slices.Contains(posted, p) {
				events.WarnNode(ReasonConfigProblem, truncate(p, maxEventMessage))
			}
		}
		posted = slices.Clone(v.ConfigErrors)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
