package deviceplugin

import (
	"path/filepath"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

// cdiSharedDevice is the CDI device name of a shared pool's whole set.
const cdiSharedDevice = "all"

// cdiName is the fully qualified CDI device name; the kind is the resource
// name ("rdma.kube-rdma.io/hca=0000:18:00.0").
func cdiName(resource, device string) string { return resource + "=" + device }

// cdiAnnotationKey is the annotation older runtimes read CDI devices from.
func cdiAnnotationKey(pool string) string {
	name := "kube-rdma_" + pool
	if len(name) > 63 {
		name = name[:63]
	}
	return "cdi.k8s.io/" + name
}

// cdiWriter keeps one CDI spec file per pool in dir.
type cdiWriter struct {
	dir     string
	devRoot string
	hook    string // the memlock hook's host path; "" for none
	// failClosed names the netdev hook on the chained pool's devices (with
	// hook); nil for none.
	failClosed *FailClosed
}

// FailClosed is what the netdev hook of the chained pool's CDI devices
// reads (Config.FailClosed).
type FailClosed struct {
	// StateDir is the CNI plugin's attachment records as the host sees
	// them; "" when the plugin is not installed (every container of the
	// pool is refused, as the NRI plugin refuses it).
	StateDir string
	// Chain is what the node's chained entry attaches.
	Chain netdevcheck.Chain
}

// netdevWhy says how the pool's pods get netdevs from the CNI plugin
// (netdevcheck.Pools, the rule the NRI plugin and the detector apply: the
// chained entry's pool, a gpuAligned pool); "" when they do not or no
// netdev hook is configured.
func (w cdiWriter) netdevWhy(pool config.Pool) netdevcheck.Why {
	if w.hook == "" || w.failClosed == nil {
		return ""
	}
	why := netdevcheck.Pools([]agent.PoolView{{Name: pool.Name, Mode: pool.Mode, Binding: pool.Binding}}, w.failClosed.Chain)[pool.Name]
	if why != netdevcheck.Chained && why != netdevcheck.GPUAligned {
		return ""
	}
	return why
}

func (w cdiWriter) path(pool string) string {
	return filepath.Join(w.dir, "kube-rdma-"+pool+".json")
}

// write replaces the pool's spec when the file is not that spec (changed
// says so). A shared pool's spec has one device, "all", of every member; so
// has a gpuAligned pool's: its slots name no fixed NIC (the CNI plugin binds
// them at sandbox creation) and its containers get every member's device
// nodes, as Allocate returns them, and the spec's memlock hook. A pool
// without members has none (containeredits.UpdateSpec
// removes it: the CDI registry refuses a spec with no devices, and
// containerd with it every spec).
func (w cdiWriter) write(pool config.Pool, resource string, members []discovery.RDMADevice) (changed bool, err error) {
	spec := cdispec.Spec{Kind: resource, Devices: []cdispec.Device{}}
	if containeredits.Present(w.devRoot, RDMACM) {
		spec.ContainerEdits.DeviceNodes = containeredits.CDIDeviceNodes([]string{RDMACM})
	}
	// The hook is the spec's, not a device's: the runtime applies a spec's
	// own edits once per container however many of its devices it gets.
	if w.hook != "" {
		spec.ContainerEdits.Hooks = []*cdispec.Hook{memlockhook.CDIHook(w.hook, pool.MemlockLimit())}
	}
	// Device nodes only. The environment names every device of the container
	// (NCCL_IB_HCA==mlx5_3,mlx5_4), so it is the Allocate response's, which
	// every kubelet passes: the runtime applies CDI edits device by device, and
	// a per-device KUBE_RDMA_*/NCCL_* would leave the container with the last
	// device's value only (seen with containerd 2.2 in the local-node e2e).
	why := w.netdevWhy(pool)
	edits := func(devs []discovery.RDMADevice) cdispec.ContainerEdits {
		e := cdispec.ContainerEdits{DeviceNodes: containeredits.CDIDeviceNodes(containeredits.DeviceNodes(devs))}
		if why != "" {
			names := make([]string, len(devs))
			for i, d := range devs {
				names[i] = d.Name
				if fn := attachment.FunctionID(d.PCIAddress, d.AuxDevice); fn != "" {
					names[i] += "@" + fn
				}
			}
			e.Hooks = []*cdispec.Hook{memlockhook.CDINetdevHook(w.hook, memlockhook.NetdevCheck{
				StateDir: w.failClosed.StateDir, Pool: pool.Name, How: string(why), Devices: names,
				Bound: why == netdevcheck.GPUAligned})}
		}
		return e
	}
	// A device without device nodes (its uverbs not there yet) is left out:
	// the runtimes' CDI cache refuses a device with no edits, and with it
	// every spec of the directory. A container given it fails to start on
	// the unresolvable name, which the runtime reports.
	add := func(name string, devs []discovery.RDMADevice) {
		if e := edits(devs); len(e.DeviceNodes) > 0 {
			spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: e})
		}
	}
	if pool.Mode == config.Shared || pool.GPUAligned() {
		add(cdiSharedDevice, members)
	} else {
		for _, d := range members {
			add(DeviceID(d), []discovery.RDMADevice{d})
		}
	}
	return containeredits.UpdateSpec(w.path(pool.Name), spec)
}

func (w cdiWriter) remove(pool string) error {
	return containeredits.RemoveSpec(w.path(pool))
}
