package dra

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// Attributes only the metadata file carries (docs/dra.md, "Device
// metadata"): facts a workload needs at run time that a scheduler does not
// select on.
const (
	// MetaPort is the RDMA port the port attributes describe (1), as
	// NCCL_IB_HCA and UCX_NET_DEVICES name it (mlx5_0:1).
	MetaPort = Domain + "/port"
	// MetaUverbs is the device's verbs node (/dev/infiniband/uverbsN), the
	// one the container got for it.
	MetaUverbs = Domain + "/uverbs"
	// MetaNodeGUID is the device's node GUID (InfiniBand and RoCE).
	MetaNodeGUID = Domain + "/nodeGUID"
	// MetaGPUs lists, comma-separated, the PCI addresses of the node's GPUs
	// closest to the device (MetaGPULevel); absent on a node without GPUs.
	MetaGPUs = Domain + "/closestGPUs"
	// MetaGPUUUIDs lists the same GPUs' UUIDs where the driver reports them
	// (NVIDIA), in the same order.
	MetaGPUUUIDs = Domain + "/closestGPUUUIDs"
	// MetaGPULevel is their PCIe distance to the device, as nvidia-smi topo
	// -m names it (PIX, PXB, PHB, NODE, SYS).
	MetaGPULevel = Domain + "/closestGPULevel"
)

// MetadataDir is where the kubelet plugin helper keeps the claims' metadata
// files, under the plugin directory (kubeletplugin.EnableDeviceMetadata).
const MetadataDir = "dra-device-metadata"

// DeviceMetadata is what a prepared device's metadata file says of it: its
// published attributes (pool included), the run-time facts above, and no
// network data: the netdev's name in the pod is the CNI plugin's choice at
// sandbox creation, after Prepare; the file names the host's netdev
// (kube-rdma.io/netdev), and in the pod /sys/class/infiniband/<rdmaDevice>/
// device/net lists the one it got.
func DeviceMetadata(d discovery.RDMADevice, published map[resourceapi.QualifiedName]resourceapi.DeviceAttribute,
	gpus []discovery.GPU, numaNodes int) *kubeletplugin.DeviceMetadata {
	a := make(map[string]resourceapi.DeviceAttribute, len(published)+6)
	for k, v := range published {
		a[string(k)] = v
	}
	str := func(name, v string) {
		if v != "" {
			a[name] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	if len(d.Ports) > 0 {
		port := int64(d.Ports[0].Port)
		a[MetaPort] = resourceapi.DeviceAttribute{IntValue: &port}
	}
	for _, c := range d.CharDevices {
		if strings.HasPrefix(filepath.Base(c), "uverbs") {
			str(MetaUverbs, c)
			break
		}
	}
	str(MetaNodeGUID, d.NodeGUID)
	if addrs, uuids, level := closestGPUs(d, gpus, numaNodes); len(addrs) > 0 {
		str(MetaGPUs, strings.Join(addrs, ","))
		if !slices.Contains(uuids, "") {
			str(MetaGPUUUIDs, strings.Join(uuids, ","))
		}
		str(MetaGPULevel, string(level))
	}
	return &kubeletplugin.DeviceMetadata{Attributes: a}
}

// closestGPUs are the GPUs at the least PCIe distance from d, in the
// discovery's order, with their UUIDs ("" where unknown) and the level.
func closestGPUs(d discovery.RDMADevice, gpus []discovery.GPU, numaNodes int) (addrs, uuids []string, level discovery.Level) {
	best := len(discovery.Levels) + 1
	for _, g := range gpus {
		l := discovery.Distance(d.Location(), g.Location(), numaNodes)
		switch r := l.Rank(); {
		case r < best:
			best, level = r, l
			addrs, uuids = []string{g.PCIAddress}, []string{g.UUID}
		case r == best:
			addrs, uuids = append(addrs, g.PCIAddress), append(uuids, g.UUID)
		}
	}
	return addrs, uuids, level
}

// removeMetadata removes what the kubelet plugin helper wrote for a claim
// with device metadata on: its metadata files under pluginDir and its
// metadata CDI specs in cdiDir. The helper removes them itself at the
// kubelet's Unprepare; this is for a claim unprepared without one (its
// ResourceClaim gone while the daemon was down). The paths are the
// helper's (kubeletplugin metadata.go: claimMetadataDir, cdiSpecFilePath);
// a test holds them to what the helper writes.
func removeMetadata(pluginDir, cdiDir, namespace, name, uid string) error {
	var errs []error
	dir := filepath.Join(pluginDir, MetadataDir, namespace+"_"+name)
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	specs, err := filepath.Glob(filepath.Join(cdiDir, fmt.Sprintf("%s_metadata_%s_*.json", DriverName, uid)))
	errs = append(errs, err)
	for _, s := range specs {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
