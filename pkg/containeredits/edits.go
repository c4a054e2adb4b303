// Package containeredits is what a container needs to use a set of RDMA
// devices, shared by the front ends (the device plugin's Allocate and CDI
// specs, the DRA driver's CDI specs): the /dev/infiniband nodes, the NCCL
// environment that names exactly those devices, and the writing of CDI spec
// files. It reads and writes only the files it is given; it does not choose
// devices.
package containeredits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// RDMACM is the RDMA connection manager node every RDMA container needs.
const RDMACM = "/dev/infiniband/rdma_cm"

// DeviceNodes lists the /dev/infiniband nodes of the devices, in order, once.
func DeviceNodes(devs []discovery.RDMADevice) []string {
	var out []string
	for _, d := range devs {
		for _, c := range d.CharDevices {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// FabricEnv names the devices for the libraries that choose a fabric by
// environment: NCCL_IB_HCA with the "=" prefix so NCCL matches the names
// exactly (mlx5_1 does not also pick mlx5_10), NCCL_IB_GID_INDEX when every
// port is RoCE and they agree on the index, with UCX_IB_GID_INDEX naming the
// same GID (UCX's own choice can differ from NCCL's: it takes an IPv4 GID
// the pod's IPAM added after this answer, which a verbs-only connection
// cannot always route from the pod), and UCX_NET_DEVICES (UCX, so Open
// MPI's and NIXL's UCX transports) as device:port for every port of the
// devices, in the same order.
func FabricEnv(devs []discovery.RDMADevice) map[string]string {
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, d.Name)
	}
	e := map[string]string{"NCCL_IB_HCA": "=" + strings.Join(names, ",")}
	if idx, ok := discovery.CommonRoCEv2GIDIndex(devs); ok {
		e["NCCL_IB_GID_INDEX"] = strconv.Itoa(idx)
		e["UCX_IB_GID_INDEX"] = strconv.Itoa(idx)
	}
	if ucx := discovery.UCXNetDevices(devs); ucx != "" {
		e["UCX_NET_DEVICES"] = ucx
	}
	return e
}

// Present reports whether a /dev path exists on the host, looking under
// devRoot (where this process sees the host's /dev).
func Present(devRoot, p string) bool {
	rel, ok := strings.CutPrefix(p, "/dev/")
	if !ok {
		return false
	}
	_, err := os.Stat(filepath.Join(devRoot, rel))
	return err == nil
}

// CDIDeviceNodes are read-write CDI device nodes at the same path on the
// host and in the container.
func CDIDeviceNodes(paths []string) []*cdispec.DeviceNode {
	out := make([]*cdispec.DeviceNode, 0, len(paths))
	for _, p := range paths {
		out = append(out, &cdispec.DeviceNode{Path: p, HostPath: p, Permissions: "rw"})
	}
	return out
}

// WriteSpec sets the spec's minimum version and replaces the file at path
// atomically and durably (fsynced) when its content changes, creating the
// directory. A spec with no devices is not written: the file at path is
// removed instead. The CDI registry refuses such a spec ("invalid CDI Spec:
// invalid spec, no devices"), and containerd then fails its whole registry
// refresh, so a pool left without members (its only device gone, or lent
// to a pod in the exclusive netns mode before this rule and
// pkg/agent's lent devices) would break the CDI devices of every pod.
func WriteSpec(path string, spec cdispec.Spec) error {
	_, err := UpdateSpec(path, spec)
	return err
}

// UpdateSpec is WriteSpec that also says whether the file changed: written
// or removed because what was there (or not there) was not spec.
func UpdateSpec(path string, spec cdispec.Spec) (bool, error) {
	if len(spec.Devices) == 0 {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		return true, RemoveSpec(path)
	}
	v, err := cdispec.MinimumRequiredVersion(&spec)
	if err != nil {
		return false, fmt.Errorf("cdi spec version for %s: %w", spec.Kind, err)
	}
	spec.Version = v
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return false, fmt.Errorf("encode cdi spec for %s: %w", spec.Kind, err)
	}
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("create cdi dir: %w", err)
	}
	if err := validateSpec(filepath.Dir(path), data); err != nil {
		return false, fmt.Errorf("cdi spec for %s not written: %w", spec.Kind, err)
	}
	// Fsynced: a claim stays prepared across a reboot, and its spec in a
	// persistent CDI dir must then be whole for the runtime.
	if err := atomicfile.WriteSynced(path, 0o644, ".kube-rdma-*.tmp", atomicfile.Bytes(data)); err != nil {
		return false, fmt.Errorf("write cdi spec: %w", err)
	}
	return true, nil
}

// validateSpec reads data as the runtimes read a spec file (containerd's
// and CRI-O's CDI cache: tags.cncf.io/container-device-interface), from a
// temporary file in dir: one invalid spec in a CDI directory fails the
// runtime's whole refresh of it, every other vendor's specs too. The file's
// name ends in .tmp, which the runtimes' caches do not read.
func validateSpec(dir string, data []byte) error {
	f, err := os.CreateTemp(dir, ".kube-rdma-*.tmp")
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Close()); err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	if _, err := cdi.ReadSpec(f.Name(), 0); err != nil {
		return fmt.Errorf("the runtime would refuse it: %w", err)
	}
	return nil
}

// RemoveSpec removes a spec file; one that is not there is not an error.
func RemoveSpec(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cdi spec: %w", err)
	}
	return nil
}
