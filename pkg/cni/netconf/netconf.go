// Package netconf parses and validates the kube-rdma CNI plugin's network
// configuration against the node file's host-level settings (Node: the
// paths and checks a netconf cannot change), and plans which device gets
// which interface name. It is pure: no I/O, no netlink, no logging.
package netconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// PluginType is the "type" the plugin is configured under.
const PluginType = "kube-rdma"

// Defaults for fields the configuration leaves out.
const (
	DefaultStateDir      = "/var/lib/cni/kube-rdma"
	DefaultSysfsRoot     = "/sys"
	DefaultKubeletSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
	DefaultProcRoot      = "/proc"
	// DefaultAllocDir is the device plugin's --alloc-dir default
	// (allocdir.DefaultRoot, docs/gpu-aligned.md).
	DefaultAllocDir = "/var/run/kube-rdma/alloc"
	// DefaultGPUResourceName is the resource whose devices are the pod's
	// GPUs for a gpuAligned pool (NVIDIA's device plugin).
	DefaultGPUResourceName = "nvidia.com/gpu"
)

// Netns modes the configuration may ask for.
const (
	ModeAuto      rdma.NetnsMode = "auto"
	ModeShared                   = rdma.NetnsShared
	ModeExclusive                = rdma.NetnsExclusive
)

// SharedNetdev is the sharedNetdev setting.
type SharedNetdev string

// The sharedNetdev values.
const (
	SharedMacvlan SharedNetdev = "macvlan"
	SharedIPVLAN  SharedNetdev = "ipvlan"
	SharedNone    SharedNetdev = "none"
	// DefaultSharedNetdev is the value of a netconf that leaves it out:
	// none in this release, so that a record with a child (attachment
	// schema 2, which the previous release refuses) is written only where
	// the netconf opts in, and a rollback of the plugin stays safe while
	// it does not (docs/upgrades.md). The next release makes it macvlan.
	DefaultSharedNetdev = SharedNone
)

// ErrInvalid marks a configuration that is JSON but not a valid one: an
// unknown field, a value of the wrong type, an inconsistent setting.
var ErrInvalid = errors.New("invalid network configuration")

// ErrDecode marks stdin data that is not a JSON object at all (CNI code 6,
// "failed to decode content", as skel answers for it).
var ErrDecode = errors.New("network configuration is not a JSON object")

// Conf is a validated configuration with defaults applied.
type Conf struct {
	CNIVersion string
	Name       string
	// IPAMType is the IPAM plugin to delegate to; "" for none.
	IPAMType string
	// DeviceID is the device Multus (or the runtime) chose:
	// runtimeConfig.deviceID, else the top-level deviceID Multus writes.
	DeviceID string
	MTU      int
	// MAC is the address to give the pod interface (runtimeConfig.mac wins
	// over mac); nil to keep the device's own.
	MAC          net.HardwareAddr
	ResourceName string
	// DRAClaimsDir, when set, is DRA mode: the devices are those of the
	// DRA claims the node agent prepared for the pod (K8S_POD_UID), read
	// from its records in this directory (package claimrecord).
	DRAClaimsDir   string
	InterfaceNames []string
	KubeletSocket  string
	StateDir       string
	SysfsRoot      string
	// ProcRoot is where NVIDIA's /proc/driver/nvidia files are read (GPU
	// UUIDs and minors, for gpuAligned pools).
	ProcRoot string
	// AllocDir is the device plugin's --alloc-dir: where the pool files of
	// gpuAligned pools are and where ADD writes each container's files.
	AllocDir string
	// GPUResourceName is the kubelet resource of the pod's GPUs.
	GPUResourceName string
	NetnsMode       rdma.NetnsMode
	// SharedNetdev is what a pod gets of a NIC of a shared pool: a child
	// of its netdev of this kind on Ethernet (RoCE), an IPoIB child on
	// InfiniBand whatever the kind, or nothing (SharedNone, the default
	// in this release: device nodes only, as before child netdevs).
	SharedNetdev SharedNetdev
	LogFile      string
	// RequirePodResources refuses an ADD with a deviceID when the
	// "allocated to this pod" check cannot be made (no PodResources socket,
	// no pod name in CNI_ARGS) instead of skipping it. The node file's
	// value (true by default); a netconf can turn it on, not off.
	RequirePodResources bool
	// PrevResult is the previous plugin's result when chained, converted to
	// the current result version; nil otherwise.
	PrevResult       *types100.Result
	ValidAttachments []types.GCAttachment
}

// Standalone reports whether ADD attaches the set of devices the node
// allocated to the pod (the kubelet's PodResources API for resourceName,
// the DRA claims' records for draClaimsDir) rather than one deviceID.
func (c *Conf) Standalone() bool {
	return c.DeviceID == "" && (c.ResourceName != "" || c.DRAClaimsDir != "")
}

// FromDRA reports whether the devices are the pod's DRA claims'.
func (c *Conf) FromDRA() bool { return c.DeviceID == "" && c.DRAClaimsDir != "" }

type runtimeConfig struct {
	DeviceID string   `json:"deviceID,omitempty"`
	MAC      string   `json:"mac,omitempty"`
	IPs      []string `json:"ips,omitempty"` // read by the IPAM plugin
}

// raw lists every field accepted; anything else is an error.
type raw struct {
	CNIVersion       string               `json:"cniVersion"`
	Name             string               `json:"name"`
	Type             string               `json:"type"`
	Capabilities     map[string]bool      `json:"capabilities,omitempty"`
	IPAM             json.RawMessage      `json:"ipam,omitempty"`
	DNS              json.RawMessage      `json:"dns,omitempty"`
	PrevResult       json.RawMessage      `json:"prevResult,omitempty"`
	RuntimeConfig    *runtimeConfig       `json:"runtimeConfig,omitempty"`
	Args             json.RawMessage      `json:"args,omitempty"`
	ValidAttachments []types.GCAttachment `json:"cni.dev/valid-attachments,omitempty"`

	DeviceID string `json:"deviceID,omitempty"`
	// PCIBusID: Multus writes the device into a delegate's config as both deviceID and
	// pciBusID (the name SR-IOV's CNI reads); the same device, or the netconf is refused.
	PCIBusID       string   `json:"pciBusID,omitempty"`
	MTU            int      `json:"mtu,omitempty"`
	MAC            string   `json:"mac,omitempty"`
	ResourceName   string   `json:"resourceName,omitempty"`
	DRAClaimsDir   string   `json:"draClaimsDir,omitempty"`
	InterfaceNames []string `json:"interfaceNames,omitempty"`
	KubeletSocket  string   `json:"kubeletSocket,omitempty"`
	StateDir       string   `json:"stateDir,omitempty"`
	SysfsRoot      string   `json:"sysfsRoot,omitempty"`
	ProcRoot       string   `json:"procRoot,omitempty"`
	AllocDir       string   `json:"allocDir,omitempty"`
	GPUResource    string   `json:"gpuResourceName,omitempty"`
	RdmaNetnsMode  string   `json:"rdmaNetnsMode,omitempty"`
	SharedNetdev   string   `json:"sharedNetdev,omitempty"`
	LogFile        string   `json:"logFile,omitempty"`

	RequirePodResources *bool `json:"requirePodResources,omitempty"`
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
}

// Parse decodes and validates stdin data, taking the host-level settings
// from node (see Node). It does not require a device: DEL, CHECK, GC and
// STATUS work without one; see RequireDevice.
func Parse(data []byte, node Node) (*Conf, error) {
	r, err := decode(data)
	if err != nil {
		return nil, err
	}
	c := fromRaw(r)
	if err := checkIdentity(r); err != nil {
		return nil, err
	}
	if err := node.defaults(); err != nil { // the zero Node is the defaults
		return nil, err
	}
	if err := applyNode(c, r, node); err != nil {
		return nil, err
	}
	if c.IPAMType, err = parseIPAMType(r.IPAM); err != nil {
		return nil, err
	}
	if err := applyRuntimeConfig(c, r); err != nil {
		return nil, err
	}
	if err := checkLinkFields(c); err != nil {
		return nil, err
	}
	if err := checkDRA(c); err != nil {
		return nil, err
	}
	if err := defaultAndCheckNetnsMode(c); err != nil {
		return nil, err
	}
	if err := defaultAndCheckShared(c, r); err != nil {
		return nil, err
	}
	if c.GPUResourceName == "" {
		c.GPUResourceName = DefaultGPUResourceName
	}
	if len(r.PrevResult) > 0 && string(r.PrevResult) != "null" {
		prev, err := parsePrevResult(r.CNIVersion, r.PrevResult)
		if err != nil {
			return nil, err
		}
		c.PrevResult = prev
	}
	return c, nil
}

// decode reads exactly one configuration object, rejecting unknown fields.
func decode(data []byte) (*raw, error) {
	var r raw
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
			errors.As(err, &te) && te.Field == "" {
			return nil, fmt.Errorf("%w: %w", ErrDecode, err)
		}
		return nil, invalid("decode: %v", err)
	}
	if dec.More() {
		return nil, invalid("trailing data after the configuration object")
	}
	return &r, nil
}

// fromRaw copies the fields taken as they are from the decoded object.
func fromRaw(r *raw) *Conf {
	return &Conf{
		CNIVersion: r.CNIVersion, Name: r.Name, DeviceID: r.DeviceID, MTU: r.MTU,
		ResourceName: r.ResourceName, DRAClaimsDir: r.DRAClaimsDir, InterfaceNames: r.InterfaceNames,
		GPUResourceName: r.GPUResource, NetnsMode: rdma.NetnsMode(r.RdmaNetnsMode), ValidAttachments: r.ValidAttachments,
	}
}

// checkIdentity checks the plugin type, network name and CNI version.
func checkIdentity(r *raw) error {
	if r.Type != PluginType {
		return invalid("type is %q, want %q", r.Type, PluginType)
	}
	if r.Name == "" {
		return invalid("name is empty")
	}
	if r.CNIVersion == "" {
		return invalid("cniVersion is empty")
	}
	return nil
}

// parseIPAMType returns the IPAM plugin's name, or "" when there is no ipam section.
func parseIPAMType(data json.RawMessage) (string, error) {
	if len(data) == 0 || string(data) == "null" {
		return "", nil
	}
	var ipam struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(data, &ipam); err != nil {
		return "", invalid("ipam: %v", err)
	}
	if ipam.Type == "" || strings.ContainsAny(ipam.Type, "/\\") || ipam.Type == "." || ipam.Type == ".." {
		return "", invalid("ipam.type %q is not a plugin name", ipam.Type)
	}
	return ipam.Type, nil
}

// applyRuntimeConfig takes pciBusID as the deviceID it must equal, lets runtimeConfig
// override deviceID and mac, then parses the MAC.
func applyRuntimeConfig(c *Conf, r *raw) error {
	switch {
	case r.PCIBusID == "":
	case c.DeviceID == "":
		c.DeviceID = r.PCIBusID
	case c.DeviceID != r.PCIBusID:
		return invalid("pciBusID %q is not deviceID %q", r.PCIBusID, c.DeviceID)
	}
	mac := r.MAC
	if rc := r.RuntimeConfig; rc != nil {
		if rc.DeviceID != "" {
			c.DeviceID = rc.DeviceID
		}
		if rc.MAC != "" {
			mac = rc.MAC
		}
	}
	if mac == "" {
		return nil
	}
	m, err := net.ParseMAC(mac)
	if err != nil || len(m) != 6 {
		return invalid("mac %q is not an Ethernet address", mac)
	}
	if m[0]&1 != 0 {
		return invalid("mac %q is a multicast address", mac)
	}
	c.MAC = m
	return nil
}

// checkLinkFields checks the MTU, the deviceID and the interface names.
func checkLinkFields(c *Conf) error {
	if c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535) {
		return invalid("mtu %d is outside 68..65535", c.MTU)
	}
	if strings.ContainsAny(c.DeviceID, "/\x00") || len(c.DeviceID) > 64 {
		return invalid("deviceID %q is not a device name or PCI address", c.DeviceID)
	}
	seen := map[string]bool{}
	for _, n := range c.InterfaceNames {
		if err := ValidIfName(n); err != nil {
			return invalid("interfaceNames: %v", err)
		}
		if seen[n] {
			return invalid("interfaceNames: %q appears twice", n)
		}
		seen[n] = true
	}
	return nil
}

// checkDRA checks that draClaimsDir is the one source of the pod's
// devices: a resourceName would be a second, a deviceID (Multus) a third.
func checkDRA(c *Conf) error {
	switch {
	case c.DRAClaimsDir == "":
		return nil
	case !strings.HasPrefix(c.DRAClaimsDir, "/"):
		return invalid("draClaimsDir %q is not absolute", c.DRAClaimsDir)
	case c.ResourceName != "":
		return invalid("draClaimsDir and resourceName both name where the pod's devices come from; configure one")
	case c.DeviceID != "":
		return invalid("draClaimsDir attaches the devices of the pod's DRA claims; it does not take a deviceID (%q)", c.DeviceID)
	}
	return nil
}

// defaultAndCheckNetnsMode defaults the RDMA netns mode to auto and checks it.
func defaultAndCheckNetnsMode(c *Conf) error {
	switch c.NetnsMode {
	case "":
		c.NetnsMode = ModeAuto
	case ModeAuto, ModeShared, ModeExclusive:
	default:
		return invalid("rdmaNetnsMode %q is not auto, shared or exclusive", c.NetnsMode)
	}
	return nil
}

// defaultAndCheckShared defaults sharedNetdev (DefaultSharedNetdev: none in
// this release) and checks it: an IPVLAN child has its parent's MAC, so a
// mac with ipvlan is a contradiction.
func defaultAndCheckShared(c *Conf, r *raw) error {
	switch v := SharedNetdev(r.SharedNetdev); v {
	case "":
		c.SharedNetdev = DefaultSharedNetdev
	case SharedMacvlan, SharedIPVLAN, SharedNone:
		c.SharedNetdev = v
	default:
		return invalid("sharedNetdev %q is not macvlan, ipvlan or none", r.SharedNetdev)
	}
	if c.SharedNetdev == SharedIPVLAN && c.MAC != nil {
		return invalid("mac %s cannot be given to an ipvlan child (it has its parent's MAC): drop mac, or use sharedNetdev macvlan", c.MAC)
	}
	return nil
}

func parsePrevResult(ver string, data json.RawMessage) (*types100.Result, error) {
	nc := &types.NetConf{CNIVersion: ver}
	if err := json.Unmarshal(data, &nc.RawPrevResult); err != nil {
		return nil, invalid("prevResult: %v", err)
	}
	if err := version.ParsePrevResult(nc); err != nil {
		return nil, invalid("prevResult: %v", err)
	}
	res, err := types100.NewResultFromResult(nc.PrevResult)
	if err != nil {
		return nil, invalid("prevResult: %v", err)
	}
	return res, nil
}

// RequireDevice checks that an ADD knows where its devices come from.
func (c *Conf) RequireDevice() error {
	if c.DeviceID == "" && c.ResourceName == "" && c.DRAClaimsDir == "" {
		return invalid("missing deviceID: set runtimeConfig.deviceID (Multus), resourceName (PodResources) or draClaimsDir (DRA)")
	}
	return nil
}

// ValidIfName checks a Linux interface name.
func ValidIfName(n string) error {
	if n == "" || len(n) > 15 || n == "." || n == ".." || strings.ContainsAny(n, "/: \t\n\x00") {
		return fmt.Errorf("%q is not a valid interface name", n)
	}
	return nil
}
