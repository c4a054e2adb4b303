// Package config owns the device plugin's configuration file: its schema
// (YAML, or JSON which is a subset), validation with errors that name the
// offending field, the built-in default, and the selector that decides which
// RDMA devices a pool takes.
//
// It reads no sysfs and talks to no kubelet: Select works on discovery.RDMADevice
// values handed in by the caller.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Mode says how a pool turns RDMA devices into kubelet devices.
type Mode string

const (
	// Exclusive advertises one kubelet device per RDMA device (PF, VF, SF or
	// rxe); a pod gets the devices it was allocated and nothing else.
	Exclusive Mode = "exclusive"
	// Shared advertises the pool's whole device set as Slots kubelet
	// devices; every pod that gets a slot gets all of the set. A shared
	// pool of frontend dra publishes each device for Slots claims at once
	// instead (DRA consumable capacity: docs/dra.md, "Shared pools").
	Shared Mode = "shared"
)

// Binding says who chooses the RDMA devices behind a pool's kubelet devices.
type Binding string

const (
	// KubeletBinding (the default, "") lets the kubelet's device IDs name the
	// RDMA devices.
	KubeletBinding Binding = ""
	// GPUAligned advertises an exclusive pool as interchangeable slots; the
	// CNI binds the NICs closest to the pod's GPUs at sandbox creation
	// (docs/gpu-aligned.md).
	GPUAligned Binding = "gpuAligned"
)

// DefaultPrefix is the resource prefix of the built-in configuration.
const DefaultPrefix = "rdma.kube-rdma.io"

// DefaultSlots is how many slots a shared pool advertises when Slots is 0.
const DefaultSlots = 100

// Config is the whole configuration file.
type Config struct {
	// ResourcePrefix is the resource name's domain: a pool "hca" is
	// advertised as "<ResourcePrefix>/hca".
	ResourcePrefix string `json:"resourcePrefix"`
	Pools          []Pool `json:"pools"`
}

// Frontend is how a pool's devices reach pods.
type Frontend string

const (
	// DevicePlugin (the default, "" or "devicePlugin") advertises the pool
	// to the kubelet as an extended resource.
	DevicePlugin Frontend = "devicePlugin"
	// DRA publishes the pool's devices in ResourceSlices and prepares
	// claims for them (pkg/dra, docs/dra.md): a device of an exclusive
	// pool goes to one claim, one of a shared pool to up to Slots claims.
	DRA Frontend = "dra"
)

// Pool is one kubelet extended resource, or one DRA pool.
type Pool struct {
	Name string `json:"name"`
	Mode Mode   `json:"mode"`
	// Slots is the number of kubelet devices a shared pool advertises
	// (DefaultSlots when 0); for a shared pool of frontend dra, the number
	// of claims one device takes at once (its kube-rdma.io/shares
	// capacity). It must be 0 for an exclusive pool.
	Slots int `json:"slots,omitempty"`
	// Binding is "" or GPUAligned (exclusive pools only).
	Binding Binding `json:"binding,omitempty"`
	// Frontend serves the pool: "" or DevicePlugin, or DRA. A pool has
	// exactly one, and a device is in one pool only.
	Frontend Frontend `json:"frontend,omitempty"`
	// Memlock is the RLIMIT_MEMLOCK (soft = hard) that the memlock hook in
	// the pool's CDI specs and the NRI plugin give the containers that got
	// this pool's devices: "unlimited" or a quantity such as 64Gi; "" is
	// unlimited.
	Memlock string `json:"memlock,omitempty"`
	// NCCL says whether the pool sets NCCL's variables (NCCL_IB_HCA,
	// NCCL_IB_GID_INDEX; NCCL_CONF_FILE for a gpuAligned pool) in its
	// containers; unset is true. The per-pool KUBE_RDMA_<POOL>_* variables
	// are set either way. A container has one NCCL_IB_HCA: two NCCL pools
	// with devices on one node are reported there (NCCLConflicts;
	// docs/device-plugin.md, "A pod with several pools").
	NCCL *bool `json:"nccl,omitempty"`
	// AllowConfiguredNetdevs lets the CNI plugin move a member's netdev
	// into a pod although the host has configured it: addresses of its own
	// (global or site scope), or a port of a bond, team, bridge, Open
	// vSwitch bridge or VRF. The host loses them for good: the kernel drops
	// a moved netdev's addresses and releases it from its master, and DEL
	// does not restore them. False refuses such a device (code 101); a
	// netdev that carries the host's default route is refused either way.
	AllowConfiguredNetdevs bool      `json:"allowConfiguredNetdevs,omitempty"`
	Selectors              Selectors `json:"selectors"`
}

// Selectors choose RDMA devices. A device matches when it matches every
// non-empty field (AND); a field matches when any of its values does (OR).
type Selectors struct {
	// Vendors are PCI vendor IDs, hex without 0x ("15b3").
	Vendors []string `json:"vendors,omitempty"`
	// DeviceIDs are PCI device IDs, hex without 0x ("1021").
	DeviceIDs []string `json:"deviceIDs,omitempty"`
	// Drivers are kernel driver names of the PCI function ("mlx5_core").
	Drivers []string `json:"drivers,omitempty"`
	// Netdevs are names of the device's network interfaces ("ibp24s0").
	Netdevs []string `json:"netdevs,omitempty"`
	// RDMADevices are RDMA device names ("mlx5_0").
	RDMADevices []string `json:"rdmaDevices,omitempty"`
	// PCIAddresses are PCI functions ("0000:18:00.0"); an SF matches its PF's.
	PCIAddresses []string `json:"pciAddresses,omitempty"`
	// LinkLayers are "InfiniBand" or "Ethernet" (port 1's link layer).
	LinkLayers []string `json:"linkLayers,omitempty"`
	// Kinds are "PF", "VF", "SF" or "virtual": ["PF"] is PF-only, ["VF"] VF-only.
	Kinds []string `json:"kinds,omitempty"`
	// PFNames select VFs by their PF: its netdev name, RDMA device name or
	// PCI address. A device that is not a VF never matches this field.
	PFNames []string `json:"pfNames,omitempty"`
}

// IsEmpty reports whether no selector field is set.
func (s Selectors) IsEmpty() bool {
	return len(s.Vendors)+len(s.DeviceIDs)+len(s.Drivers)+len(s.Netdevs)+len(s.RDMADevices)+
		len(s.PCIAddresses)+len(s.LinkLayers)+len(s.Kinds)+len(s.PFNames) == 0
}

// ResourceName returns the kubelet resource name of a pool.
func (c Config) ResourceName(p Pool) string { return c.ResourcePrefix + "/" + p.Name }

// GPUAligned reports whether the pool has binding gpuAligned.
func (p Pool) GPUAligned() bool { return p.Binding == GPUAligned }

// SetsNCCL reports whether the pool sets NCCL's variables (NCCL unset or true).
func (p Pool) SetsNCCL() bool { return p.NCCL == nil || *p.NCCL }

// DRA reports whether the DRA front end serves the pool.
func (p Pool) DRA() bool { return p.Frontend == DRA }

// SlotCount returns how many kubelet devices a shared pool advertises.
func (p Pool) SlotCount() int {
	if p.Slots > 0 {
		return p.Slots
	}
	return DefaultSlots
}

// Default is the configuration used without a file: one exclusive pool "hca"
// with every RDMA device.
func Default() Config {
	return Config{
		ResourcePrefix: DefaultPrefix,
		Pools: []Pool{{
			Name: "hca", Mode: Exclusive,
			Selectors: Selectors{Kinds: []string{"PF", "VF", "SF", "virtual"}},
		}},
	}
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid device plugin config")

// Parse decodes YAML or JSON, rejecting unknown fields, and validates it.
func Parse(data []byte) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(data)) == 0 {
		return c, fmt.Errorf("%w: file is empty", ErrInvalid)
	}
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return c, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Load reads and parses the pools file at path; "" is Default. It is used
// at start and on every reload. data is the file's content, also when it
// does not parse (so a reloader can tell an unchanged bad file from a new
// one); an unreadable file wraps the os error (errors.Is(err, fs.ErrNotExist)
// while a ConfigMap update swaps its symlinks).
func Load(path string) (c Config, data []byte, err error) {
	if path == "" {
		return Default(), nil, nil
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("read device plugin config: %w", err)
	}
	c, err = Parse(data)
	if err != nil {
		return Config{}, data, fmt.Errorf("load %s: %w", path, err)
	}
	return c, data, nil
}
