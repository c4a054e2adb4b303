package deviceplugin

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
)

// ErrUnknownDevice: Allocate named a device ID the pool does not advertise.
var ErrUnknownDevice = errors.New("unknown device ID")

// RDMACM is the RDMA connection manager node every RDMA container needs.
const RDMACM = containeredits.RDMACM

// allocContext is what Allocate needs beyond the pool's snapshot.
type allocContext struct {
	// devRoot is where this process sees the host's /dev (--dev-root); it
	// is only read from. DeviceSpec and CDI host paths are the host's own
	// /dev paths, which is what the kubelet and the runtime open.
	devRoot string
	cdi     bool // CDI specs are written: return CDI devices too
	// allocDir is --alloc-dir, the same path on the host and in this
	// process: the allocation directories of gpuAligned pools.
	allocDir string
	// devInfoDir is where device-info files are written (Config.DeviceInfoDir).
	devInfoDir string
}

// present reports whether a /dev path exists on the host, looking under devRoot.
func (a allocContext) present(p string) bool { return containeredits.Present(a.devRoot, p) }

// container builds one ContainerAllocateResponse.
func (a allocContext) container(pool config.Pool, resource string, snap snapshot, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: empty device list", ErrUnknownDevice)
	}
	if pool.GPUAligned() {
		return a.aligned(pool, resource, snap, ids)
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	var devs []discovery.RDMADevice
	seen := map[string]bool{}
	for _, id := range sorted {
		ds, ok := snap.byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q is not a device of pool %s", ErrUnknownDevice, id, pool.Name)
		}
		for _, d := range ds {
			if !seen[d.Name] {
				seen[d.Name] = true
				devs = append(devs, d)
			}
		}
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%w: pool %s has no devices for %v", ErrUnknownDevice, pool.Name, ids)
	}
	r := &pluginapi.ContainerAllocateResponse{Envs: envs(pool, devs)}
	nodes := containeredits.DeviceNodes(devs)
	if a.present(RDMACM) {
		nodes = append(nodes, RDMACM)
	}
	for _, n := range nodes {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: n, HostPath: n, Permissions: "rw"})
	}
	if pool.Mode == config.Shared {
		a.addCDI(r, pool, resource, []string{cdiSharedDevice})
	} else {
		a.addCDI(r, pool, resource, sorted)
	}
	return r, nil
}

// addCDI names the pool's CDI devices in r, as CDIDevices and as the
// annotation older runtimes read, when CDI specs are written.
func (a allocContext) addCDI(r *pluginapi.ContainerAllocateResponse, pool config.Pool, resource string, devices []string) {
	if !a.cdi {
		return
	}
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = cdiName(resource, d)
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: names[i]})
	}
	r.Annotations = map[string]string{cdiAnnotationKey(pool.Name): strings.Join(names, ",")}
}

// aligned answers for slots of a gpuAligned pool (docs/gpu-aligned.md):
// the device nodes of every member, the allocation directory (created here,
// empty, filled by the CNI at sandbox creation) mounted read-only, and the
// environment that points at its files (NCCL_CONF_FILE only when the pool
// sets NCCL's variables), and the pool's one CDI device, "all", which
// carries the same device nodes and the memlock hook. No NCCL_IB_HCA: an
// environment variable would override nccl.conf.
func (a allocContext) aligned(pool config.Pool, resource string, snap snapshot, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	var members []discovery.RDMADevice
	for _, id := range ids {
		ds, ok := snap.byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q is not a slot of pool %s", ErrUnknownDevice, id, pool.Name)
		}
		members = ds // every slot stands for the whole pool
	}
	if len(members) == 0 {
		return nil, fmt.Errorf("%w: pool %s has no devices for %v", ErrUnknownDevice, pool.Name, ids)
	}
	host := allocdir.AllocPath(a.allocDir, pool.Name, allocdir.AllocID(ids))
	if err := mkdirMode(allocdir.PoolDir(a.allocDir, pool.Name), 0o755); err != nil {
		return nil, fmt.Errorf("allocation directory: %w", err)
	}
	if err := mkdirMode(host, 0o755); err != nil {
		return nil, fmt.Errorf("allocation directory: %w", err)
	}
	if err := emptyDir(host); err != nil {
		return nil, fmt.Errorf("allocation directory: %w", err)
	}
	// Young again: the sweeper keeps a directory no container holds yet
	// for a grace period after this.
	now := time.Now()
	if err := os.Chtimes(host, now, now); err != nil {
		return nil, fmt.Errorf("allocation directory: %w", err)
	}
	env := map[string]string{"KUBE_RDMA_" + config.EnvName(pool.Name) + "_ENV_FILE": allocdir.ContainerEnvFile(pool.Name)}
	if pool.SetsNCCL() {
		env["NCCL_CONF_FILE"] = allocdir.ContainerNCCLConf(pool.Name)
	}
	r := &pluginapi.ContainerAllocateResponse{
		Envs:   env,
		Mounts: []*pluginapi.Mount{{ContainerPath: allocdir.ContainerPath(pool.Name), HostPath: host, ReadOnly: true}},
	}
	nodes := containeredits.DeviceNodes(members)
	if a.present(RDMACM) {
		nodes = append(nodes, RDMACM)
	}
	for _, n := range nodes {
		r.Devices = append(r.Devices, &pluginapi.DeviceSpec{ContainerPath: n, HostPath: n, Permissions: "rw"})
	}
	a.addCDI(r, pool, resource, []string{cdiSharedDevice})
	return r, nil
}

// emptyDir removes what dir holds. An allocation directory is named after
// its slots, so an earlier pod that had the same slots left its files there;
// the kubelet calls Allocate for every container of a pod at admission,
// before the sandbox exists and the CNI writes this pod's files.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("empty %s: %w", dir, err)
		}
	}
	return nil
}

// envs names what the container got: KUBE_RDMA_<POOL>_*, and NCCL's and
// UCX's variables when the pool sets them (containeredits.FabricEnv). The
// kubelet keeps one value of each: a node with two such pools is reported
// (config.NCCLConflicts).
func envs(pool config.Pool, devs []discovery.RDMADevice) map[string]string {
	var names, pcis []string
	for _, d := range devs {
		names = append(names, d.Name)
		if d.PCIAddress != "" && !slices.Contains(pcis, d.PCIAddress) {
			pcis = append(pcis, d.PCIAddress)
		}
	}
	stem := "KUBE_RDMA_" + config.EnvName(pool.Name)
	e := map[string]string{}
	if pool.SetsNCCL() {
		e = containeredits.FabricEnv(devs)
	}
	e[stem+"_RDMA_DEVICES"] = strings.Join(names, ",")
	e[stem+"_PCI_ADDRESSES"] = strings.Join(pcis, ",")
	return e
}
