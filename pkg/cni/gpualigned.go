package cni

// The CNI side of `binding: gpuAligned` pools (docs/gpu-aligned.md): the
// kubelet allocated interchangeable slots of the pool; ADD asks PodResources
// for the pod's slots and GPUs, picks that many free NICs of the pool closest
// to the GPUs under the node-wide lock (allocator.AlignToGPUs), attaches
// them as it attaches any device, and fills each container's allocation
// directory (allocfiles.go). The layout and the IDs are the device plugin's
// allocdir package, which imports the standard library only.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/quarantine"
	"github.com/kube-rdma/kube-rdma/pkg/allocator"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// gpuRequest is what a gpuAligned ADD knows before the node-wide lock: the
// pool, the pod's slots per container and its GPUs. The choice is made
// under the lock (align).
type gpuRequest struct {
	pool allocdir.PoolFile
	// slots holds, per container with slots of the pool, its slot IDs in
	// the kubelet's order.
	slots [][]string
	// size is the pod's slot count: the NICs it gets.
	size int
	// gpuIDs are the kubelet's IDs of the pod's GPUs, gpus the GPUs they
	// name, in the same order.
	gpuIDs []string
	gpus   []discovery.GPU
	numa   int

	// Set by align, under the lock.
	alignment allocator.Alignment
	chosen    map[string]discovery.RDMADevice
}

// findGPUAlignedPool returns the pool file of the gpuAligned pool whose
// resource is resource, scanning the pool directories under root; ok is
// false when there is none (no alloc dir, or another kind of pool). A pool
// file that cannot be read is an error only when no pool matched: it may be
// the pool wanted. One that does not decode is moved aside by
// allocdir.ReadPoolFile and logged: it costs only its own pool, whose pods
// are refused with ErrRecordDamaged (try again: the daemon writes it again)
// by the pool's name, the resource's after its "/".
func findGPUAlignedPool(root, resource string, log *slog.Logger) (allocdir.PoolFile, bool, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return allocdir.PoolFile{}, false, nil
	}
	if err != nil {
		return allocdir.PoolFile{}, false, fmt.Errorf("list gpuAligned pools in %s: %w", root, err)
	}
	var errs []error
	var torn error
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), "_") || strings.HasPrefix(e.Name(), ".") {
			continue // _quarantine: no pool's name begins so
		}
		pf, err := allocdir.ReadPoolFile(root, e.Name())
		if d := (*quarantine.Damaged)(nil); errors.As(err, &d) {
			log.Error("pool file does not decode; moved aside, the node agent writes it again",
				"path", d.Path, "movedTo", d.Moved, "err", d.Err)
			if e.Name() == resource[strings.LastIndex(resource, "/")+1:] {
				torn = fmt.Errorf("%w: gpuAligned pool %s: %w", ErrRecordDamaged, e.Name(), err)
			}
			continue
		}
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pf.Resource == resource && pf.Binding == allocdir.BindingGPUAligned {
			return pf, true, nil
		}
	}
	if torn != nil {
		return allocdir.PoolFile{}, false, torn
	}
	if len(errs) > 0 {
		return allocdir.PoolFile{}, false, fmt.Errorf("find the pool of %s in %s: %w", resource, root, errors.Join(errs...))
	}
	return allocdir.PoolFile{}, false, nil
}

// gpuAlignedRequest returns nil when resourceName is not a gpuAligned pool
// (the kubelet's device IDs name the devices). Otherwise it asks the
// kubelet for the pod's slots and GPUs and finds the GPUs on the node; a
// request with size 0 means the pod holds no slot (pass through).
func (p *Plugin) gpuAlignedRequest(ctx context.Context, conf *netconf.Conf, pod podRef, log *slog.Logger) (*gpuRequest, error) {
	pf, ok, err := findGPUAlignedPool(conf.AllocDir, conf.ResourceName, log)
	if err != nil || !ok {
		return nil, err
	}
	if !pod.known() {
		return nil, fmt.Errorf("%w: resourceName mode needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS", ErrBadEnvironment)
	}
	if p.holdsNone(conf, pod, log) {
		return &gpuRequest{pool: pf}, nil
	}
	var ctrs []podresources.ContainerDevices
	err = p.askKubelet(ctx, conf, pod, log, func(ctx context.Context, c PodResources) (err error) {
		ctrs, err = c.PodContainerDevices(ctx, pod.Namespace, pod.Name)
		return err
	})
	switch {
	case errors.Is(err, errNoKubeletSocket):
		return nil, fmt.Errorf("%w: %w", ErrNotAvailable, err)
	case errors.Is(err, podresources.ErrPodNotFound):
		log.Warn("kubelet does not know the pod; it has no devices allocated", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return &gpuRequest{pool: pf}, nil
	case err != nil:
		return nil, err
	}
	r := &gpuRequest{pool: pf}
	for _, c := range ctrs {
		switch c.Resource {
		case conf.ResourceName:
			for _, id := range c.DeviceIDs {
				if _, ok := allocdir.SlotIndex(pf.Pool, id); !ok {
					return nil, fmt.Errorf("device %q of %s allocated to container %s: not a slot of gpuAligned pool %s (daemon and pool file disagree?)",
						id, c.Resource, c.Container, pf.Pool)
				}
			}
			if len(c.DeviceIDs) > 0 {
				r.slots = append(r.slots, slices.Clone(c.DeviceIDs))
				r.size += len(c.DeviceIDs)
			}
		case conf.GPUResourceName:
			for _, id := range c.DeviceIDs {
				if !slices.Contains(r.gpuIDs, id) {
					r.gpuIDs = append(r.gpuIDs, id)
				}
			}
		}
	}
	if r.size == 0 || len(r.gpuIDs) == 0 {
		return r, nil
	}
	src := p.gpuSource(conf)
	gpus, _, err := src.GPUs()
	if err != nil {
		return nil, fmt.Errorf("read the node's gpus: %w", err)
	}
	for _, id := range r.gpuIDs {
		g, ok := matchGPU(gpus, id)
		if !ok {
			return nil, fmt.Errorf("gpu %q of pod %s/%s (%s) has no UUID, minor number or PCI address on this node (sysfs %s, procfs %s): %w",
				id, pod.Namespace, pod.Name, conf.GPUResourceName, conf.SysfsRoot, conf.ProcRoot, ErrDeviceNotFound)
		}
		r.gpus = append(r.gpus, g)
	}
	r.numa = src.NUMANodes()
	return r, nil
}

func (p *Plugin) gpuSource(conf *netconf.Conf) GPUSource {
	if p.GPUs == nil {
		return scannerGPUs(conf.SysfsRoot, conf.ProcRoot)
	}
	return p.GPUs(conf.SysfsRoot, conf.ProcRoot)
}

// matchGPU finds the GPU a kubelet device ID names: NVIDIA's device plugin
// uses the UUID ("GPU-..."), or with an index strategy the minor number;
// a PCI address is also accepted.
func matchGPU(gpus []discovery.GPU, id string) (discovery.GPU, bool) {
	for _, g := range gpus {
		if g.UUID != "" && strings.EqualFold(g.UUID, id) || strings.EqualFold(g.PCIAddress, id) {
			return g, true
		}
	}
	if n, err := strconv.Atoi(id); err == nil && n >= 0 {
		for _, g := range gpus {
			if g.Minor != nil && *g.Minor == n {
				return g, true
			}
		}
	}
	return discovery.GPU{}, false
}

// align picks the pod's NICs, with the node-wide lock held: out of the
// pool's members that pool.json says are healthy, no record claims, and
// whose netdev is in the host netns, the r.size closest to the pod's GPUs
// (allocator.AlignToGPUs; a compact set, allocator.Closest, without GPUs).
// It changes nothing.
func (p *Plugin) align(r *gpuRequest, claims map[string]attachment.Key, res Resolver, log *slog.Logger) ([]string, error) {
	var topo allocator.Topology
	var free []string
	r.chosen = map[string]discovery.RDMADevice{}
	devs := map[string]discovery.RDMADevice{}
	for _, m := range r.pool.Members {
		if !slices.Contains(r.pool.Healthy, m) {
			continue
		}
		if _, ok := claims[m]; ok {
			continue
		}
		d, err := res.LookupRDMA(m)
		if err != nil {
			log.Warn("pool member not usable", "pool", r.pool.Pool, "rdma", m, "err", err)
			continue
		}
		nd := hostNetdev(d)
		if nd == "" {
			log.Warn("pool member has no netdev in the host netns", "pool", r.pool.Pool, "rdma", m)
			continue
		}
		if _, err := p.Links.Get(p.HostNS, nd); err != nil {
			log.Warn("pool member's netdev not usable in the host netns", "pool", r.pool.Pool, "rdma", m, "netdev", nd, "err", err)
			continue
		}
		free = append(free, m)
		devs[m] = d
		topo.Devices = append(topo.Devices, allocator.Device{ID: m, Location: d.Location(), LinkLayer: d.LinkLayer})
	}
	if len(free) < r.size {
		return nil, fmt.Errorf("gpuAligned pool %s: the pod holds %d slots but only %d of the pool's %d NICs are free (healthy, not attached, netdev on the host): %w",
			r.pool.Pool, r.size, len(free), len(r.pool.Members), ErrDeviceInUse)
	}
	topo.NUMANodes = r.numa
	locs := make([]discovery.Location, len(r.gpus))
	for i, g := range r.gpus {
		locs[i] = g.Location()
	}
	a, err := allocator.AlignToGPUs(topo, allocator.Request{Available: free, Size: r.size}, locs)
	if err != nil {
		return nil, fmt.Errorf("gpuAligned pool %s: choose %d of %d free NICs: %w", r.pool.Pool, r.size, len(free), err)
	}
	r.alignment = a
	for _, n := range a.NICs {
		r.chosen[n] = devs[n]
	}
	ids := slices.Clone(a.NICs)
	netconf.SortDevices(ids)
	return ids, nil
}

// requireExclusive refuses a gpuAligned binding whose RDMA devices would
// not move: the container has every member's device nodes, and only in
// exclusive mode are the NICs left on the host unusable from the pod.
func requireExclusive(r *gpuRequest, cands []candidate) error {
	for _, c := range cands {
		if c.soft == "" && !c.exclus {
			return fmt.Errorf("%w: gpuAligned pool %s needs the exclusive RDMA netns mode (rdma system set netns exclusive, or ib_core netns_mode=0)",
				ErrNotAvailable, r.pool.Pool)
		}
	}
	return nil
}

// binding is the record's account of the choice.
func (r *gpuRequest) binding() *attachment.Binding {
	b := &attachment.Binding{Pool: r.pool.Pool}
	for _, s := range r.slots {
		b.AllocIDs = append(b.AllocIDs, allocdir.AllocID(s))
	}
	for _, pr := range r.alignment.Pairs {
		g := r.gpus[pr.GPU]
		b.Pairs = append(b.Pairs, attachment.BindingPair{GPU: g.PCIAddress, GPUID: r.gpuIDs[pr.GPU], NIC: pr.NIC, Level: string(pr.Level)})
	}
	return b
}
