package agent_test

import (
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// The agent with its device plugin front end against the kubelet
// stand-in, from internal/agenttest, under the names these tests use.
type env = agenttest.Env

var (
	health      = agenttest.Health
	hasHealth   = agenttest.HasHealth
	scrape      = agenttest.Scrape
	scrapeUntil = agenttest.ScrapeUntil
	writeFile   = agenttest.WriteFile
	ids         = agenttest.IDs
	poll        = agenttest.Poll
)

// start builds topo, starts a kubelet stand-in and the agent with its
// device plugin front end, and waits until it is ready.
func start(t *testing.T, topo nodesim.Topology, mutate func(*agenttest.Config)) *env {
	t.Helper()
	return agenttest.Start(t, topo, mutate)
}

// hca is the resource of the default config's one pool.
const hca = "rdma.kube-rdma.io/hca"
