package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// AllocationLister lists the kubelet's device allocations, one entry per
// container and resource (PodResources List; a podresources.Client).
type AllocationLister interface {
	List(ctx context.Context) ([]podresources.ContainerDevices, error)
}

const (
	// DefaultAllocGCInterval is how often allocation directories are swept.
	DefaultAllocGCInterval = time.Minute
	// DefaultAllocGCGrace keeps a directory that no container holds while
	// it is younger than this: Allocate has just made (or emptied) it and
	// the kubelet lists the container once its admission is done.
	DefaultAllocGCGrace = time.Minute
	// listTimeout bounds one PodResources List.
	listTimeout = 10 * time.Second
)

// allocSweeper removes the allocation directories of gpuAligned pools whose
// slots no container of PodResources holds any more (docs/gpu-aligned.md,
// CNI ADD step 4). It reads the served pools from the daemon's view, so it
// runs on its own goroutine; a failed List removes nothing.
type allocSweeper struct {
	root            string
	lister          AllocationLister
	view            func() View
	interval, grace time.Duration
	log             *slog.Logger
}

func (s allocSweeper) run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.sweep(ctx, time.Now())
		if err != nil {
			s.log.Warn("sweep allocation directories", "err", err)
		}
		if n > 0 {
			s.log.Info("removed allocation directories no container holds", "count", n)
		}
	}
}

// sweep lists the allocations first and reads the directories' times
// after, so a directory Allocate makes in between is young, not unheld.
func (s allocSweeper) sweep(ctx context.Context, now time.Time) (int, error) {
	pools := map[string]string{} // resource -> pool
	for _, p := range s.view().Pools {
		if p.Binding == config.GPUAligned {
			pools[p.Resource] = p.Name
		}
	}
	if len(pools) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	ctrs, err := s.lister.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("list allocations: %w", err)
	}
	held := map[string]bool{}
	for _, c := range ctrs {
		if pool, ok := pools[c.Resource]; ok {
			held[allocdir.AllocPath(s.root, pool, allocdir.AllocID(c.DeviceIDs))] = true
		}
	}
	removed := 0
	var errs []error
	for _, pool := range sortedKeys(invert(pools)) {
		dir := allocdir.PoolDir(s.root, pool)
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("read %s: %w", dir, err))
			}
			continue
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if !e.IsDir() || !allocdir.IsAllocID(e.Name()) || held[p] {
				continue
			}
			fi, err := e.Info()
			if err != nil || now.Sub(fi.ModTime()) < s.grace {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				errs = append(errs, fmt.Errorf("remove allocation directory: %w", err))
				continue
			}
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

func invert(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}
