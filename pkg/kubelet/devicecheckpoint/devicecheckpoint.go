// Package devicecheckpoint reads the kubelet's device manager checkpoint:
// which pod holds devices of which device plugin resource. The CNI plugin
// reads it to know, without a call to the kubelet, that a pod holds no
// device of its pool.
//
// The kubelet writes the file (kubernetes pkg/kubelet/cm/devicemanager,
// kubelet_internal_checkpoint) in the device plugin directory, a constant of
// the device plugin API whatever the kubelet's --root-dir. It writes it
// after each Allocate, before Admit returns, so before the pod's sandbox
// (and its CNI ADD) exists; and atomically (a temporary file renamed). The
// format is the kubelet's own, not an API; it has been the same from
// Kubernetes 1.20 to 1.37. This package reads only the fields it needs and
// answers "unknown" (an error) for anything else: a reader then asks the
// kubelet, as it would without the file. It only reads; it never writes.
package devicecheckpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Path is the checkpoint's path: pluginapi.DevicePluginPath plus the
// device manager's file name.
const Path = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"

// maxSize bounds what Read reads. A node's checkpoint holds one entry per
// container and resource with its Allocate response: a few hundred bytes
// each, so a full node is well under 1 MiB.
const maxSize = 16 << 20

// ErrFormat is a checkpoint this package does not read: a reader asks the
// kubelet instead.
var ErrFormat = errors.New("kubelet device checkpoint in a format not known")

// Checkpoint is what the kubelet's checkpoint says: the resources each pod
// holds devices of, and the resources registered with healthy devices.
type Checkpoint struct {
	pods       map[string]map[string]bool
	registered map[string]bool
}

// Registered reports whether resource is registered with the kubelet that
// wrote the checkpoint (its plugin has healthy devices there).
func (c Checkpoint) Registered(resource string) bool { return c.registered[resource] }

// Holds reports whether the pod with podUID holds devices of resource.
func (c Checkpoint) Holds(podUID, resource string) bool { return c.pods[podUID][resource] }

// Read reads and parses the checkpoint at path.
func Read(path string) (Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return Checkpoint{}, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return Checkpoint{}, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxSize {
		return Checkpoint{}, fmt.Errorf("%s: over %d bytes: %w", path, maxSize, ErrFormat)
	}
	c, err := Parse(b)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// entry is a PodDeviceEntries element of the kubelet's checkpoint.Data:
// the fields read.
type entry struct {
	PodUID       string
	ResourceName string
}

// Parse parses a checkpoint. It wants the layout the kubelet writes: an
// object with Data and Checksum, Data with PodDeviceEntries (null when no
// pod holds a device) and RegisteredDevices, each entry with a PodUID and a
// ResourceName. Anything else is ErrFormat.
func Parse(b []byte) (Checkpoint, error) {
	var top, data map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if _, ok := top["Checksum"]; !ok {
		return Checkpoint{}, fmt.Errorf("%w: no Checksum", ErrFormat)
	}
	if err := json.Unmarshal(top["Data"], &data); err != nil || data == nil {
		return Checkpoint{}, fmt.Errorf("%w: no Data object", ErrFormat)
	}
	rawEntries, okE := data["PodDeviceEntries"]
	rawReg, okR := data["RegisteredDevices"]
	if !okE || !okR {
		return Checkpoint{}, fmt.Errorf("%w: no Data.PodDeviceEntries or Data.RegisteredDevices", ErrFormat)
	}
	var entries []entry
	if err := json.Unmarshal(rawEntries, &entries); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: Data.PodDeviceEntries: %w", ErrFormat, err)
	}
	var reg map[string][]string
	if err := json.Unmarshal(rawReg, &reg); err != nil {
		return Checkpoint{}, fmt.Errorf("%w: Data.RegisteredDevices: %w", ErrFormat, err)
	}
	c := Checkpoint{pods: map[string]map[string]bool{}, registered: map[string]bool{}}
	for i, e := range entries {
		if e.PodUID == "" || e.ResourceName == "" {
			return Checkpoint{}, fmt.Errorf("%w: entry %d has no PodUID or ResourceName", ErrFormat, i)
		}
		if c.pods[e.PodUID] == nil {
			c.pods[e.PodUID] = map[string]bool{}
		}
		c.pods[e.PodUID][e.ResourceName] = true
	}
	for r, ids := range reg {
		if len(ids) > 0 {
			c.registered[r] = true
		}
	}
	return c, nil
}
