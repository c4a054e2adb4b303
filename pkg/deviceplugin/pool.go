package deviceplugin

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/natsort"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// snapshot is what a pool advertises at one moment.
type snapshot struct {
	devices []*pluginapi.Device
	// byID maps a kubelet device ID to the RDMA devices a container gets for
	// it: one in an exclusive pool, the whole set for a shared slot.
	byID map[string][]discovery.RDMADevice
}

// setMembers replaces the pool's RDMA devices (after a scan, a port or GID
// change, or a config change) and rewrites its CDI spec, unless another
// process serves the pool now: the spec is that process's.
func (s *poolServer) setMembers(members []discovery.RDMADevice) {
	s.mu.Lock()
	s.members = members
	superseded := s.superseded
	s.mu.Unlock()
	if !superseded {
		s.removeDeviceInfo(buildSnapshot(s.pool, members, nil).byID)
	}
	if _, err := s.writeSpec(); err != nil {
		s.log.Warn("write cdi spec", "err", err)
	}
}

// writeSpec makes the pool's CDI spec on disk the spec of its members now,
// unless another process serves the pool (the spec is that process's) or
// the pool has closed; it says whether the file had to change. The spec is
// written when the members change, and checked again (a read and a compare)
// by every Allocate that names CDI devices and by the agent's files ticker
// (RestoreFiles): a spec that is gone or names other devices would fail the
// container's creation in the runtime ("unresolvable CDI devices"), minutes
// after the kubelet's Allocate, on a node where nothing then writes it again
// (a pool whose members a scan missed has no spec until a scan finds them;
// another process, or a person, may remove or replace the file).
// cdiMu orders the writers: each writes the members of its moment, the last
// one the latest.
func (s *poolServer) writeSpec() (bool, error) {
	s.cdiMu.Lock()
	defer s.cdiMu.Unlock()
	s.mu.Lock()
	members, superseded := s.members, s.superseded
	s.mu.Unlock()
	switch {
	case s.cdi == nil || superseded || s.cdiClosed:
		return false, nil
	default:
		return s.cdi.write(s.pool, s.resource, members)
	}
}

// restoreSpec is writeSpec for the files ticker: a spec it had to write
// again is logged.
func (s *poolServer) restoreSpec() {
	changed, err := s.writeSpec()
	switch {
	case err != nil:
		s.log.Warn("write cdi spec again", "err", err)
	case changed:
		s.log.Warn("the pool's CDI spec was gone or named other devices; written again from the members", "path", s.cdi.path(s.pool.Name))
	}
}

// setHealth rebuilds the advertised list with the given health; streams are
// woken only when the list the kubelet sees changes. It returns the number
// of healthy and unhealthy kubelet devices.
func (s *poolServer) setHealth(health map[string]bool) (healthy, unhealthy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = health
	snap := buildSnapshot(s.pool, s.members, health)
	same := slices.EqualFunc(snap.devices, s.snap.devices, func(a, b *pluginapi.Device) bool {
		return a.ID == b.ID && a.Health == b.Health && slices.EqualFunc(a.GetTopology().GetNodes(), b.GetTopology().GetNodes(),
			func(x, y *pluginapi.NUMANode) bool { return x.ID == y.ID })
	})
	s.snap = snap
	if !same {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	for _, d := range snap.devices {
		if d.Health == pluginapi.Healthy {
			healthy++
		} else {
			unhealthy++
		}
	}
	if s.pool.GPUAligned() && !s.superseded {
		s.writePoolFile(poolFile(s.pool, s.resource, s.members, health))
	}
	return healthy, unhealthy
}

// writePoolFile replaces <alloc-dir>/<pool>/pool.json when its content
// changes. It runs on the Run goroutine only (setHealth's caller); a failed
// write is logged and tried again with the next snapshot.
func (s *poolServer) writePoolFile(f allocdir.PoolFile) {
	data, err := f.Marshal()
	if err == nil && bytes.Equal(data, s.lastPoolFile) {
		return
	}
	if err == nil {
		err = allocdir.WritePoolFile(s.alloc.allocDir, s.pool.Name, data)
	}
	if err != nil {
		s.log.Warn("write pool file", "err", err)
		return
	}
	s.lastPoolFile = data
}

// restorePoolFile writes pool.json again when it is gone while the pool is
// served (the CNI plugin moves a torn one aside: internal/quarantine). Run
// goroutine only, as writePoolFile.
func (s *poolServer) restorePoolFile() {
	s.mu.Lock()
	superseded := s.superseded
	s.mu.Unlock()
	if !s.pool.GPUAligned() || superseded || s.lastPoolFile == nil {
		return
	}
	if _, err := os.Stat(allocdir.PoolFilePath(s.alloc.allocDir, s.pool.Name)); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := allocdir.WritePoolFile(s.alloc.allocDir, s.pool.Name, s.lastPoolFile); err != nil {
		s.log.Warn("write pool file again", "err", err)
		return
	}
	s.log.Info("pool file was missing (moved aside?); written again", "path", allocdir.PoolFilePath(s.alloc.allocDir, s.pool.Name))
}

// removePoolFile removes pool.json of a pool that is no longer served as
// gpuAligned, so the CNI stops binding its NICs. The allocation
// directories stay: running containers have them mounted.
func removePoolFile(root, pool string) error {
	if root == "" {
		return nil
	}
	return allocdir.RemovePoolFile(root, pool)
}

// mkdirMode creates dir and its parents and gives dir mode perm whatever
// the umask.
func mkdirMode(dir string, perm os.FileMode) error {
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	return nil
}

// devices returns the pool's RDMA devices.
func (s *poolServer) devices() []discovery.RDMADevice {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.members
}

// current returns the advertised list and the health it was built with.
func (s *poolServer) current() (snapshot, map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, s.health
}

// DeviceID is the kubelet device ID of an RDMA device in an exclusive pool:
// its PCI address (stable across driver reloads, unlike mlx5_N), the
// auxiliary device of an SF, the RDMA name of a virtual device.
func DeviceID(d discovery.RDMADevice) string {
	switch {
	case d.Kind == discovery.KindSF && d.AuxDevice != "":
		return d.AuxDevice
	case d.PCIAddress != "" && d.Kind != discovery.KindSF:
		return d.PCIAddress
	}
	return d.Name
}

func healthString(ok bool) string {
	if ok {
		return pluginapi.Healthy
	}
	return pluginapi.Unhealthy
}

func buildSnapshot(pool config.Pool, members []discovery.RDMADevice, health map[string]bool) snapshot {
	snap := snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}}
	if pool.GPUAligned() {
		return alignedSnapshot(pool, members, health)
	}
	if pool.Mode == config.Exclusive {
		for _, d := range members {
			id := DeviceID(d)
			snap.byID[id] = []discovery.RDMADevice{d}
			snap.devices = append(snap.devices, &pluginapi.Device{ID: id, Health: healthString(health[d.Name]), Topology: topology(d.NUMANode)})
		}
		slices.SortFunc(snap.devices, func(a, b *pluginapi.Device) int { return strings.Compare(a.ID, b.ID) })
		return snap
	}
	if len(members) == 0 {
		return snap
	}
	// A slot promises the set's healthy devices: every pod gets all of the
	// set, and NCCL and UCX leave out a port that is not ACTIVE. So the
	// slots are Healthy while one device of the set is; one uncabled port of
	// a set of many does not take every slot, and every pod with it.
	ok := anyHealthy(members, health)
	var numa []int
	for _, d := range members {
		if d.NUMANode >= 0 && !slices.Contains(numa, d.NUMANode) {
			numa = append(numa, d.NUMANode)
		}
	}
	slices.Sort(numa)
	var topo *pluginapi.TopologyInfo
	if len(numa) > 0 {
		topo = &pluginapi.TopologyInfo{}
		for _, n := range numa {
			topo.Nodes = append(topo.Nodes, &pluginapi.NUMANode{ID: int64(n)})
		}
	}
	for i := range pool.SlotCount() {
		id := nodepools.SlotID(pool.Name, i)
		snap.byID[id] = members
		snap.devices = append(snap.devices, &pluginapi.Device{ID: id, Health: healthString(ok), Topology: topo})
	}
	return snap
}

// alignedSnapshot advertises a gpuAligned pool as one slot per member,
// <pool>-slot-<i>, each standing for the whole pool (Allocate gives every
// member's device nodes; the CNI binds the NICs). Slot i is healthy while
// more than i members are: the healthy slots are as many as the healthy
// members, the lowest first. Slots carry no topology: the NICs are chosen by
// PCIe distance to the pod's GPUs at sandbox creation, and a NUMA node on a
// slot would only make the Topology Manager constrain a choice it does not
// make.
func alignedSnapshot(pool config.Pool, members []discovery.RDMADevice, health map[string]bool) snapshot {
	snap := snapshot{devices: []*pluginapi.Device{}, byID: map[string][]discovery.RDMADevice{}}
	healthy := 0
	for _, d := range members {
		if health[d.Name] {
			healthy++
		}
	}
	for i := range members {
		id := allocdir.SlotID(pool.Name, i)
		snap.byID[id] = members
		snap.devices = append(snap.devices, &pluginapi.Device{ID: id, Health: healthString(i < healthy)})
	}
	return snap
}

// poolFile is the pool file of a gpuAligned pool: members and healthy
// members by name, in natural order.
func poolFile(pool config.Pool, resource string, members []discovery.RDMADevice, health map[string]bool) allocdir.PoolFile {
	f := allocdir.PoolFile{Pool: pool.Name, Resource: resource, Binding: string(pool.Binding), Members: []string{}, Healthy: []string{},
		NoNCCL: !pool.SetsNCCL()}
	for _, d := range members {
		f.Members = append(f.Members, d.Name)
		if health[d.Name] {
			f.Healthy = append(f.Healthy, d.Name)
		}
	}
	natsort.Sort(f.Members)
	natsort.Sort(f.Healthy)
	return f
}

// anyHealthy reports whether a device of a set is healthy.
func anyHealthy(devs []discovery.RDMADevice, health map[string]bool) bool {
	return slices.ContainsFunc(devs, func(d discovery.RDMADevice) bool { return health[d.Name] })
}

// linkLayer is the link layer every port of every device shares; "" when
// they differ or there are no ports.
func linkLayer(devs []discovery.RDMADevice) string {
	ll := ""
	for _, d := range devs {
		for _, p := range d.Ports {
			switch {
			case ll == "":
				ll = p.LinkLayer
			case ll != p.LinkLayer:
				return ""
			}
		}
	}
	return ll
}

func topology(numa int) *pluginapi.TopologyInfo {
	if numa < 0 {
		return nil
	}
	return &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(numa)}}}
}
