package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// stuckLister is an AllocationLister whose List blocks, ctx or not, until
// released: a kubelet that does not answer.
type stuckLister struct {
	entered, release chan struct{}
	once             sync.Once
}

func (l *stuckLister) List(context.Context) ([]podresources.ContainerDevices, error) {
	l.once.Do(func() { close(l.entered) })
	<-l.release
	return nil, nil
}

// TestStopsFrontEndsFirst: on SIGTERM the agent stops its front ends (the
// device plugin removes its sockets and CDI specs) before it waits for its
// other goroutines. Before, a sweeper or node watcher slow to return held
// the front ends' stop back, and the kubelet kills a container its grace
// period after SIGTERM: the rxe-cluster e2e found a daemon's CDI spec left
// after helm uninstall.
func TestStopsFrontEndsFirst(t *testing.T) {
	lister := &stuckLister{entered: make(chan struct{}), release: make(chan struct{})}
	var released sync.Once
	release := func() { released.Do(func() { close(lister.release) }) }
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, selectors: {rdmaDevices: [mlx5_0]}}\n"+
		"- {name: aligned, mode: exclusive, binding: gpuAligned, nccl: false, selectors: {rdmaDevices: [mlx5_2]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.AllocDir = t.TempDir()
		c.Allocations = lister
		c.AllocGCInterval = 10 * time.Millisecond
		c.NetnsMode = agenttest.FakeNetns{Mode: rdma.NetnsExclusive} // gpuAligned pools need it
		c.CDIDir = t.TempDir()
	})
	t.Cleanup(release) // after start: runs before the agent's stop, so a failed test leaves no Run stuck
	// The pool's gRPC server stops with the context on its own; the CDI spec goes only
	// when the front end is stopped.
	spec := filepath.Join(e.Cfg.CDIDir, "kube-rdma-ib.json")
	poll(t, 5*time.Second, "the pool's CDI spec", func() bool { _, err := os.Stat(spec); return err == nil })
	select {
	case <-lister.entered:
	case <-time.After(5 * time.Second):
		v, _ := e.Agent.View()
		t.Fatalf("the sweeper never listed the allocations (view pools %+v)", v.Pools)
	}
	done := make(chan error, 1)
	go func() { done <- e.Stop() }()
	poll(t, 5*time.Second, "the CDI spec removed while the sweeper is stuck", func() bool {
		_, err := os.Stat(spec)
		return os.IsNotExist(err)
	})
	select {
	case err := <-done:
		t.Errorf("Run returned (%v) before its sweeper did", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
