// Package cni implements the kube-rdma CNI plugin's commands: ADD moves a
// NIC's netdev (and, in exclusive RDMA netns mode, its RDMA device; for
// soft-RoCE, a new rxe link) into the pod, or for a NIC of a shared pool
// creates a child of its netdev in the pod (shared.go), DEL returns them to
// the host as they were (deletes the child), CHECK, STATUS and GC report
// and repair.
//
// Handlers get their side effects through the small interfaces declared
// here (Links, Addresses, RDMA, IPAM, PodResources, Resolver) and take the
// host network namespace as a parameter, so tests run the whole plugin in a
// throw-away namespace. Parsing and planning live in the netconf package,
// records and the node-wide lock in the state package.
package cni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/devicecheckpoint"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Links reads and moves netdevs in the namespace each call names, and
// creates and deletes the child netdevs of shared NICs. rdma.Netdevs
// implements it.
type Links interface {
	Get(ns netns.NsHandle, name string) (rdma.Link, error)
	List(ns netns.NsHandle) ([]rdma.Link, error)
	Move(from netns.NsHandle, l rdma.Link, to netns.NsHandle, want rdma.LinkConfig) (rdma.Link, error)
	Set(ns netns.NsHandle, name string, want rdma.LinkConfig) (rdma.Link, error)
	AddChild(parentNS netns.NsHandle, parent string, to netns.NsHandle, c rdma.ChildConfig) (rdma.Link, error)
	Delete(ns netns.NsHandle, name, mac string) (bool, error)
}

// RDMA reads and changes RDMA devices. rdma.Devices implements it.
type RDMA interface {
	NetnsMode(ns netns.NsHandle) (rdma.NetnsMode, error)
	List(ns netns.NsHandle) ([]string, error)
	Move(from netns.NsHandle, name string, to netns.NsHandle) error
	AddRxe(ns netns.NsHandle, name, netdev string) error
	DelSoft(ns netns.NsHandle, name string) error
}

// Addresses puts IPAM's addresses and routes on a pod interface and reads
// them back for CHECK; HostUse tells ADD what the host has configured on a
// netdev before it is moved into a pod (its uplink is never moved; one with
// addresses or a master only when its pool allows it).
type Addresses interface {
	Configure(ns netns.NsHandle, ifName string, ips []*types100.IPConfig, routes []*types.Route) error
	List(ns netns.NsHandle, ifName string) ([]net.IPNet, error)
	HostUse(ns netns.NsHandle, ifName string) (rdma.HostUse, error)
}

// IPAM runs the IPAM plugin named in the configuration.
type IPAM interface {
	Add(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) (types.Result, error)
	Check(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error
	Del(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error
}

// IPAMArgs are the CNI_* values an IPAM plugin is run with.
type IPAMArgs struct {
	ContainerID, Netns, IfName, Args, Path string
}

// PodResources answers which devices the kubelet allocated to a pod, per
// container and resource (a gpuAligned pool needs the containers: each
// one's slots name its allocation directory; podresources.ByResource
// merges them per resource); a pod the kubelet does not know is
// podresources.ErrPodNotFound. GetSupport says what the kubelet answered
// to Get, which the plugin remembers for its next invocations
// (getHintFile). *podresources.H2Client implements it: the plugin links no
// grpc-go.
type PodResources interface {
	PodContainerDevices(ctx context.Context, namespace, name string) ([]podresources.ContainerDevices, error)
	GetSupport() podresources.GetSupport
}

// GPUSource reads the node's GPUs and its NUMA node count.
// discovery.Scanner implements it.
type GPUSource interface {
	GPUs() ([]discovery.GPU, []string, error)
	NUMANodes() int
}

// Resolver finds one RDMA device by name, PCI address or aux device name,
// tells whether a NIC's function (its PCI function; an SF's auxiliary
// device) is on the node and which netdevs it has on the host (a NIC whose
// netdev DEL cannot find: still on its way back from a dying pod netns,
// back re-probed under another name and MAC, or gone), and
// reads an IPoIB netdev's partition key (a shared InfiniBand NIC's child
// is in its parent's partition). discovery.Scanner implements it.
type Resolver interface {
	LookupRDMA(id string) (discovery.RDMADevice, error)
	FunctionNetdevs(pciAddr, auxDev string) (present bool, netdevs []string, err error)
	NetdevPKey(name string) (uint16, error)
}

// DefaultNetdevGiveUp is NetdevGiveUp's default: with the runtime's retries
// of DEL a few seconds apart, a pod is Terminating at most about a minute
// and a half because a NIC did not come back from its netns.
const DefaultNetdevGiveUp = 90 * time.Second

// Plugin holds the dependencies of the command handlers.
type Plugin struct {
	// HostNS is the namespace devices live in when no pod has them.
	HostNS netns.NsHandle
	// Node is the node's host-level settings (paths, requirePodResources):
	// a netconf cannot change them (netconf.Node). New reads them from the
	// node file (NodeFile).
	Node  netconf.Node
	Links Links
	Addrs Addresses
	RDMA  RDMA
	IPAM  IPAM
	// Resolver returns a resolver for the configured sysfs root.
	Resolver func(sysfsRoot string) Resolver
	// GPUs returns the GPU source for the configured sysfs and procfs
	// roots (gpuAligned pools); nil is discovery.Scanner.
	GPUs func(sysfsRoot, procRoot string) GPUSource
	// PodResources connects to the kubelet socket; skipGet asks List only
	// (an earlier invocation found that the kubelet does not serve Get).
	// The function returned closes the connection.
	PodResources func(socket string, skipGet bool) (PodResources, func(), error)
	// KubeletCheckpoint is the kubelet's device checkpoint
	// (devicecheckpoint.Path in New); "": none is read. In resourceName
	// mode a pod it shows without a device of the pool is passed through
	// without asking the kubelet (holdsNone).
	KubeletCheckpoint string
	// Log receives structured logs; a configured logFile is added to it.
	Log *slog.Logger
	// BootID tags state records so that those of an earlier boot are
	// ignored (see the state package).
	BootID string
	// SoftRDMAWait bounds the wait for the kernel to finish destroying a
	// soft-RoCE device whose netdev moved away, before its name is reused.
	SoftRDMAWait time.Duration
	// NetdevReturnWait bounds how long DEL (and GC) wait for a NIC whose
	// pod netns is gone to appear in the host netns: the kernel returns a
	// physical netdev from a dying netns asynchronously, under the pod's
	// name or "devN". Past it the record is kept (ErrNetdevNotBack). The
	// node-wide lock is not held meanwhile.
	NetdevReturnWait time.Duration
	// NetdevGiveUp bounds the wait for such a NIC across DELs and GCs,
	// from the first (the record keeps when that was): past it the NIC is
	// given up (logged as an error), the attachment ends and the device is
	// no longer claimed. The runtime retries a failed DEL, so this bounds
	// how long a pod stays Terminating because of the plugin. 0 is
	// DefaultNetdevGiveUp.
	NetdevGiveUp time.Duration

	// opPool is the pool of the command's netconf, for its operation
	// record (Main's one command per process; atomic: tests and the
	// daemon's reclaimer share a Plugin between goroutines).
	opPool atomic.Pointer[string]
	// statusDegraded is the CNI code of a STATUS of a chained entry that
	// succeeded although a check failed (Status), for its operation record.
	statusDegraded atomic.Uint32
	// gaveUp counts the NICs this command's DEL or GC gave up on (their
	// function gone, or not back within NetdevGiveUp), for its operation
	// record (OpCodeGaveUp).
	gaveUp atomic.Uint32
}

// OpCodeGaveUp is the code a DEL or GC that succeeded records in the
// operations spool when it ended an attachment without one of its NICs (the
// NIC's PCI function or auxiliary device gone, or its netdev not back within
// NetdevGiveUp): kube_rdma_cni_operations_total{code="105"} counts them. It
// is never returned to the runtime, and no error code of docs/cni.md's
// table is 105.
const OpCodeGaveUp = 105

// NodeFileEnv names the node file in the plugin's environment (the
// runtime's, which no netconf reaches); unset, it is netconf.NodeFileName
// next to the binary.
const NodeFileEnv = "KUBE_RDMA_CNI_NODE_FILE"

// NodeFile returns the path of the node file: $KUBE_RDMA_CNI_NODE_FILE, else
// netconf.NodeFileName in the binary's directory (the CNI bin directory).
func NodeFile() (path string, explicit bool, err error) {
	if p := os.Getenv(NodeFileEnv); p != "" {
		return p, true, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", false, fmt.Errorf("find the plugin's binary: %w", err)
	}
	return filepath.Join(filepath.Dir(exe), netconf.NodeFileName), false, nil
}

// LoadNode reads the node file at path. A missing file is the built-in
// defaults unless the path was named explicitly.
func LoadNode(path string, explicit bool) (netconf.Node, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return netconf.DefaultNode(), nil
	}
	if err != nil {
		return netconf.Node{}, fmt.Errorf("read node file: %w", err)
	}
	n, err := netconf.ParseNode(b)
	if err != nil {
		return netconf.Node{}, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// New returns a Plugin with the real dependencies, acting on the current
// network namespace as the host. Close the HostNS handle when done.
func New(log io.Writer) (*Plugin, error) {
	path, explicit, err := NodeFile()
	if err != nil {
		return nil, err
	}
	node, err := LoadNode(path, explicit)
	if err != nil {
		return nil, err
	}
	host, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("open current netns: %w", err)
	}
	mark("hostns")
	boot, err := attachment.ReadBootID("/proc")
	if err != nil {
		_ = host.Close()
		return nil, err
	}
	return &Plugin{
		HostNS:            host,
		Node:              node,
		BootID:            boot,
		Links:             rdma.Netdevs{},
		Addrs:             routeAddrs{},
		RDMA:              rdma.Devices{},
		IPAM:              execIPAM{},
		Resolver:          func(root string) Resolver { return discovery.Scanner{SysRoot: root} },
		GPUs:              scannerGPUs,
		PodResources:      dialPodResources,
		KubeletCheckpoint: devicecheckpoint.Path,
		Log:               slog.New(slog.NewTextHandler(log, nil)),
		SoftRDMAWait:      2 * time.Second,
		// The kernel's netns cleanup runs from a workqueue; under load it
		// takes a few seconds, well inside a runtime's DEL timeout.
		NetdevReturnWait: 5 * time.Second,
		NetdevGiveUp:     DefaultNetdevGiveUp,
	}, nil
}

// store is the state directory of conf. A record that does not decode is
// moved aside by the store and logged here, once: its pod is then as if it
// had no record (ADD goes on, DEL releases without it).
func (p *Plugin) store(conf *netconf.Conf) attachment.Store {
	return attachment.Store{Dir: conf.StateDir, BootID: p.BootID, Damaged: func(d attachment.Damaged) {
		log, done := p.logger(conf)
		defer done()
		log.Error("attachment record does not decode; moved aside, its pod is as if it had no record",
			"path", d.Path, "movedTo", d.Moved, "err", d.Err)
	}}
}

func scannerGPUs(sysfsRoot, procRoot string) GPUSource {
	return discovery.Scanner{SysRoot: sysfsRoot, ProcRoot: procRoot}
}

func dialPodResources(socket string, skipGet bool) (PodResources, func(), error) {
	c := podresources.NewH2Client(socket)
	if skipGet {
		c.SkipGet()
	}
	return c, func() { _ = c.Close() }, nil
}

// logger adds the configured log file to the plugin's logger.
func (p *Plugin) logger(conf *netconf.Conf) (*slog.Logger, func()) {
	log := p.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if conf == nil || conf.LogFile == "" {
		return log, func() {}
	}
	f, err := os.OpenFile(conf.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		log.Warn("cannot open log file", "path", conf.LogFile, "err", err)
		return log, func() {}
	}
	return slog.New(slog.NewTextHandler(io.MultiWriter(f, os.Stderr), nil)), func() { _ = f.Close() }
}

// Errors the handlers return, mapped to CNI error codes by Error.
var (
	ErrDeviceNotFound = errors.New("device not found")
	ErrDeviceInUse    = errors.New("device is in use")
	ErrNotAllocated   = errors.New("device is not allocated to this pod")
	ErrNameTaken      = errors.New("interface name is taken in the pod")
	ErrNotAttached    = errors.New("no attachment recorded")
	ErrBadEnvironment = errors.New("invalid CNI environment")
	ErrNotAvailable   = errors.New("plugin cannot work on this node")
	ErrTryAgain       = errors.New("kubelet PodResources API unavailable or rate-limited; try again later")
	// ErrNetdevNotBack: the pod netns is gone, the NIC's PCI function is on
	// the node, but its netdev did not appear in the host netns within
	// NetdevReturnWait; the record is kept for the next DEL or GC.
	ErrNetdevNotBack = errors.New("netdev has not come back to the host from the pod's netns; try again later")
	// ErrRecordDamaged: a file of the node agent's that this ADD needs (a
	// gpuAligned pool's pool.json) did not decode; it was moved aside
	// (docs/cni.md, "Torn records") and the agent writes it again.
	ErrRecordDamaged = errors.New("a node agent file did not decode and was moved aside; try again once the agent has written it again")
)

// Plugin-specific CNI error codes (100 and up are the plugin's).
const (
	CodeDeviceNotFound uint = 100 + iota
	CodeDeviceInUse
	CodeNotAllocated
	CodeNameTaken
	CodeNotAttached
	CodeInternal = 999
)

// Error converts a handler error into the CNI error format.
func Error(err error) *types.Error {
	if err == nil {
		return nil
	}
	var te *types.Error
	if errors.As(err, &te) {
		return te
	}
	code := uint(CodeInternal)
	msg := "kube-rdma failed"
	switch {
	case errors.Is(err, netconf.ErrDecode):
		code, msg = types.ErrDecodingFailure, "failed to decode network configuration"
	case errors.Is(err, netconf.ErrInvalid):
		code, msg = types.ErrInvalidNetworkConfig, "invalid network configuration"
	case errors.Is(err, ErrBadEnvironment):
		code, msg = types.ErrInvalidEnvironmentVariables, "invalid CNI environment"
	case errors.Is(err, ErrNotAvailable):
		code, msg = types.ErrPluginNotAvailable, "plugin not available"
	case errors.Is(err, ErrTryAgain), errors.Is(err, ErrNetdevNotBack), errors.Is(err, ErrRecordDamaged):
		code, msg = types.ErrTryAgainLater, "try again later"
	case errors.Is(err, ErrDeviceNotFound):
		code, msg = CodeDeviceNotFound, "device not found"
	case errors.Is(err, ErrDeviceInUse):
		code, msg = CodeDeviceInUse, "device is in use"
	case errors.Is(err, ErrNotAllocated):
		code, msg = CodeNotAllocated, "device not allocated to this pod"
	case errors.Is(err, ErrNameTaken):
		code, msg = CodeNameTaken, "interface name taken in the pod"
	case errors.Is(err, ErrNotAttached):
		code, msg = CodeNotAttached, "no such attachment"
	}
	return types.NewError(code, msg, err.Error())
}
