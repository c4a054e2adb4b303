// Package devinfo owns the device-info files of the Network Plumbing Working
// Group's Device Info Spec v1.1.0
// (https://github.com/k8snetworkplumbingwg/device-info-spec): a device plugin
// writes, for each device it allocates, a JSON file named after the resource
// and the kubelet's device ID in the spec's device plugin directory
// (DefaultDPDir); Multus copies it for the CNI plugin that gets the device
// and puts it in the pod's network-status annotation ("device-info").
//
// It is the on-disk contract between the device plugin front end and every
// consumer of the spec; it links the standard library only, reads no sysfs
// and decides nothing: the caller says which directory, which device and
// what it is. network-attachment-definition-client's pkg/utils does the
// same with a directory fixed at the host path; a directory given as a value
// lets the daemon write where it mounts the host's and tests use a temp dir.
package devinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/atomicfile"
)

// Version is the spec version this package writes and reads.
const Version = "1.1.0"

// TypePCI is the device type of a PCI function.
const TypePCI = "pci"

// DefaultDPDir is the spec's directory of device plugins' files on the host.
const DefaultDPDir = "/var/run/k8s.cni.cncf.io/devinfo/dp"

// Info is one device-info file. Only the pci type is written here.
type Info struct {
	Type    string `json:"type"`
	Version string `json:"version"`
	PCI     *PCI   `json:"pci,omitempty"`
}

// PCI is the spec's pci object: the function, its RDMA device and, for a
// VF, its PF.
type PCI struct {
	PCIAddress   string `json:"pci-address,omitempty"`
	RDMADevice   string `json:"rdma-device,omitempty"`
	PFPCIAddress string `json:"pf-pci-address,omitempty"`
}

// ErrVersion: a file of another spec version.
var ErrVersion = errors.New("unsupported device-info version")

// FileName is the spec's name of a device plugin's file:
// "<resource>-<deviceID>-device.json" with every "/" made "-".
func FileName(resource, deviceID string) string {
	return fmt.Sprintf("%s-%s-device.json", strings.ReplaceAll(resource, "/", "-"), strings.ReplaceAll(deviceID, "/", "-"))
}

// NewPCI is the Info of a PCI function.
func NewPCI(p PCI) Info { return Info{Type: TypePCI, Version: Version, PCI: &p} }

// Save writes the file of resource's deviceID in dir, creating dir. The file
// is written beside and renamed into place: a reader (Multus at the pod's
// ADD) sees the old file or the new one, never half of one.
func Save(dir, resource, deviceID string, info Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("encode device-info of %s %s: %w", resource, deviceID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create device-info dir: %w", err)
	}
	path := filepath.Join(dir, FileName(resource, deviceID))
	if old, err := os.ReadFile(path); err == nil && string(old) == string(b) {
		return nil
	}
	if err := atomicfile.Write(path, b, 0o644, ".devinfo-*"); err != nil {
		return fmt.Errorf("write device-info %s: %w", path, err)
	}
	return nil
}

// Load reads the file of resource's deviceID in dir. A file of another spec
// major version is ErrVersion.
func Load(dir, resource, deviceID string) (Info, error) {
	path := filepath.Join(dir, FileName(resource, deviceID))
	b, err := os.ReadFile(path)
	if err != nil {
		return Info{}, fmt.Errorf("read device-info: %w", err)
	}
	var info Info
	if err := json.Unmarshal(b, &info); err != nil {
		return Info{}, fmt.Errorf("decode device-info %s: %w", path, err)
	}
	if major(info.Version) != major(Version) {
		return Info{}, fmt.Errorf("device-info %s: %w %q (want %s)", path, ErrVersion, info.Version, Version)
	}
	return info, nil
}

func major(v string) string { m, _, _ := strings.Cut(v, "."); return m }

// Remove deletes the file of resource's deviceID in dir; a file that is not
// there is no error.
func Remove(dir, resource, deviceID string) error {
	err := os.Remove(filepath.Join(dir, FileName(resource, deviceID)))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove device-info: %w", err)
	}
	return nil
}
