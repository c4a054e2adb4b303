package cni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/quarantine"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// podRef is the pod named in CNI_ARGS.
type podRef struct{ Namespace, Name, UID string }

func (p podRef) known() bool { return p.Namespace != "" && p.Name != "" }

// parseCNIArgs reads K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID from CNI_ARGS
// ("K=V;K=V"); other keys are ignored.
func parseCNIArgs(s string) podRef {
	var p podRef
	for kv := range strings.SplitSeq(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "K8S_POD_NAMESPACE":
			p.Namespace = v
		case "K8S_POD_NAME":
			p.Name = v
		case "K8S_POD_UID":
			p.UID = v
		}
	}
	return p
}

// errNoKubeletSocket is allocated's answer when the PodResources socket
// does not exist: the one failure that may skip the "allocated to this pod"
// check (a node without a kubelet, e.g. a plain container runtime).
var errNoKubeletSocket = errors.New("kubelet PodResources socket does not exist")

// allocated asks the kubelet for the pod's devices. A socket that does not
// exist is errNoKubeletSocket; a pod the kubelet does not know is
// podresources.ErrPodNotFound; a kubelet that does not answer, or answers
// that it is unavailable or rate-limited, after askKubelet's tries, is
// ErrTryAgain; any other answer is an error as it came.
func (p *Plugin) allocated(ctx context.Context, conf *netconf.Conf, pod podRef, log *slog.Logger) (map[string][]string, error) {
	var devs map[string][]string
	err := p.askKubelet(ctx, conf, pod, log, func(ctx context.Context, c PodResources) error {
		ctrs, err := c.PodContainerDevices(ctx, pod.Namespace, pod.Name)
		if err != nil {
			return err
		}
		devs = podresources.ByResource(ctrs)
		return nil
	})
	return devs, err
}

// selectDevices returns the device IDs this ADD attaches: the deviceID,
// checked against the pod's allocation, in standalone mode every device
// of the resource allocated to the pod, or in DRA mode every device of the
// pod's claims.
//
// shared says the devices came from a shared pool (a slot of the device
// plugin's shared pool: shared.go): the pod gets a child of each one's
// netdev, which stays on the host. In DRA mode sharedDRA names the devices
// of which the pod's claims hold a share (claimedDevices), shared is false.
func (p *Plugin) selectDevices(ctx context.Context, conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) (ids []string, shared bool, sharedDRA map[string]bool, err error) {
	if conf.FromDRA() {
		ids, sharedDRA, err := p.claimedDevices(conf, pod, res, log)
		return ids, false, sharedDRA, err
	}
	ids, shared, err = p.selectPluginDevices(ctx, conf, pod, res, log)
	return ids, shared, nil, err
}

// selectPluginDevices is selectDevices for the device plugin's pools.
func (p *Plugin) selectPluginDevices(ctx context.Context, conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) (ids []string, shared bool, err error) {
	if !conf.Standalone() {
		return p.selectDeviceID(ctx, conf, pod, res, log)
	}
	if !pod.known() {
		return nil, false, fmt.Errorf("%w: resourceName mode needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS", ErrBadEnvironment)
	}
	if p.holdsNone(conf, pod, log) {
		return nil, false, nil
	}
	alloc, err := p.allocated(ctx, conf, pod, log)
	switch {
	case errors.Is(err, errNoKubeletSocket):
		return nil, false, fmt.Errorf("%w: %w", ErrNotAvailable, err)
	case errors.Is(err, podresources.ErrPodNotFound):
		log.Warn("kubelet does not know the pod; it has no devices allocated", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	if pool, ok := sharedResourcePool(conf, alloc[conf.ResourceName], log); ok {
		return sharedMembers(conf, pool, log), true, nil
	}
	// Name the devices by their RDMA names, sorted, so that a pod's
	// interfaces come in the same order however the kubelet lists them.
	ids = nil
	for _, id := range alloc[conf.ResourceName] {
		if d, err := res.LookupRDMA(id); err == nil {
			id = d.Name
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	netconf.SortDevices(ids)
	return ids, false, nil
}

// selectDeviceID checks the deviceID (Multus) against the node and the
// pod's allocation. A deviceID that is a slot of a shared pool, or a member
// of one whose slot the pod holds, is shared (sharedDeviceID).
func (p *Plugin) selectDeviceID(ctx context.Context, conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) ([]string, bool, error) {
	if !pod.known() && conf.RequirePodResources {
		return nil, false, fmt.Errorf("%w: requirePodResources needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS", ErrBadEnvironment)
	}
	// A device that does not exist is 100 whatever the kubelet says, unless
	// it is a shared pool's slot.
	d, err := res.LookupRDMA(conf.DeviceID)
	var slot *nodepools.Pool
	if errors.Is(err, discovery.ErrNotFound) {
		if pool, ok := sharedSlotPool(conf, log); ok {
			slot, err = &pool, nil
		}
	}
	if err != nil {
		return nil, false, lookupError(conf.DeviceID, err)
	}
	if slot == nil {
		if err := requireInPool(conf, d, log); err != nil {
			return nil, false, err
		}
	}
	single := func() ([]string, bool, error) {
		if slot != nil {
			return sharedSlotMember(conf, *slot, log)
		}
		return []string{conf.DeviceID}, false, nil
	}
	if !pod.known() {
		return single()
	}
	alloc, err := p.allocated(ctx, conf, pod, log)
	switch {
	case errors.Is(err, errNoKubeletSocket) && conf.RequirePodResources:
		return nil, false, fmt.Errorf("%w: deviceID %q cannot be checked against the pod's allocation (requirePodResources): %w",
			ErrNotAvailable, conf.DeviceID, err)
	case errors.Is(err, errNoKubeletSocket):
		log.Warn("kubelet PodResources socket does not exist; deviceID not checked against the pod's allocation",
			"socket", conf.KubeletSocket)
		return single()
	case errors.Is(err, podresources.ErrPodNotFound):
		// At sandbox creation the kubelet knows the pod: a pod it does
		// not know has nothing allocated by it (wrong CNI_ARGS, or
		// another kubelet's socket).
		return nil, false, fmt.Errorf("deviceID %q: %w %s/%s: %w", conf.DeviceID, ErrNotAllocated, pod.Namespace, pod.Name, err)
	case err != nil:
		return nil, false, fmt.Errorf("check deviceID %q against the pod's allocation: %w", conf.DeviceID, err)
	}
	var held []string
	for name, ids := range alloc {
		if conf.ResourceName != "" && name != conf.ResourceName {
			continue
		}
		held = append(held, ids...)
	}
	if slot != nil {
		if slices.Contains(held, conf.DeviceID) {
			return single()
		}
		return nil, false, fmt.Errorf("deviceID %q (a slot of shared pool %s): %w %s/%s", conf.DeviceID, slot.Name, ErrNotAllocated, pod.Namespace, pod.Name)
	}
	for _, id := range held {
		if sameDevice(id, conf.DeviceID, d) {
			return []string{conf.DeviceID}, false, nil
		}
	}
	if pool, ok := sharedHolds(conf, held, d, log); ok {
		if conf.SharedNetdev == netconf.SharedNone {
			log.Info("sharedNetdev none: a shared pool's pod gets no netdev", "pool", pool, "deviceID", conf.DeviceID)
			return nil, false, nil
		}
		return []string{d.Name}, true, nil
	}
	return nil, false, fmt.Errorf("deviceID %q (rdma device %s): %w %s/%s", conf.DeviceID, d.Name, ErrNotAllocated, pod.Namespace, pod.Name)
}

// requireInPool refuses a deviceID whose device is in no pool the node's
// daemon serves (its pools file, package nodepools): 102, before the
// kubelet is asked. Without the file (no daemon has run on this node, or an
// older one) the check cannot be made: refused, 50, when the node requires
// the kubelet's confirmation (requirePodResources, the default), else
// skipped with a warning, as a missing kubelet socket is. A torn file is
// moved aside and then missing.
func requireInPool(conf *netconf.Conf, d discovery.RDMADevice, log *slog.Logger) error {
	path := nodepools.Path(conf.AllocDir)
	f, err := nodepools.Read(path)
	// A torn file is moved aside by Read and is missing from then on, until
	// the daemon writes it again: the missing-file rule applies.
	var torn *quarantine.Damaged
	if errors.As(err, &torn) {
		log.Error("the node's pools file does not decode; moved aside, missing until the node agent writes it again",
			"path", torn.Path, "movedTo", torn.Moved, "err", torn.Err)
	}
	switch {
	case errors.Is(err, fs.ErrNotExist) && !conf.RequirePodResources:
		log.Warn("no pools file; deviceID not checked against the node's pools", "path", path, "deviceID", conf.DeviceID)
		return nil
	case torn != nil:
		return fmt.Errorf("%w: deviceID %q cannot be checked against the node's pools (requirePodResources): %w",
			ErrNotAvailable, conf.DeviceID, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: deviceID %q cannot be checked against the node's pools (requirePodResources): "+
			"%s does not exist: the kube-rdma daemon has not published this node's pools (start it, or finish its upgrade)",
			ErrNotAvailable, conf.DeviceID, path)
	case err != nil:
		return fmt.Errorf("%w: check deviceID %q against the node's pools: %w", ErrNotAvailable, conf.DeviceID, err)
	}
	if _, ok := f.PoolOf(d.Name, d.PCIAddress); !ok {
		return fmt.Errorf("deviceID %q (rdma device %s, PCI address %q) is in no pool of this node (%s): %w",
			conf.DeviceID, d.Name, d.PCIAddress, path, ErrNotAllocated)
	}
	return nil
}

func sameDevice(allocID, deviceID string, d discovery.RDMADevice) bool {
	for _, s := range []string{deviceID, d.Name, d.PCIAddress, d.AuxDevice} {
		if s != "" && strings.EqualFold(allocID, s) {
			return true
		}
	}
	return false
}

func lookupError(id string, err error) error {
	if errors.Is(err, discovery.ErrNotFound) {
		return fmt.Errorf("resolve device %q: %w: %w", id, ErrDeviceNotFound, err)
	}
	return fmt.Errorf("resolve device %q: %w", id, err)
}

// candidate is a device resolved and checked before any change.
type candidate struct {
	dev    discovery.RDMADevice
	host   rdma.Link
	podIf  string
	soft   string // "rxe" for a soft-RoCE device
	exclus bool   // move the RDMA device itself (set by markExclusive)
	// child is set for a device of a shared pool: the pod gets a child of
	// this kind of host (the parent), with pkey (IPoIB) as the parent's.
	child rdma.ChildKind
	pkey  uint16
}

// hostNetdev returns the netdev an RDMA device's traffic uses.
func hostNetdev(d discovery.RDMADevice) string {
	if d.Parent != "" {
		return d.Parent
	}
	for _, p := range d.Ports {
		if p.Netdev != "" {
			return p.Netdev
		}
	}
	if len(d.Netdevs) > 0 {
		return d.Netdevs[0]
	}
	return ""
}

// softType returns the link type to re-create a software RDMA device with.
func softType(d discovery.RDMADevice) string {
	if d.Kind != discovery.KindVirtual {
		return ""
	}
	if strings.HasPrefix(d.Name, "siw") {
		return "siw"
	}
	return "rxe"
}

// resolve checks every planned device against the node and the claims
// without changing anything: it exists, nobody claimed it, its netdev is in
// the host netns and its pod name is free.
//
// A shared device may be claimed by other attachments' children
// (sharedClaim tells), never by a move; its netdev is the parent of the
// pod's child and stays on the host.
func (p *Plugin) resolve(conf *netconf.Conf, plan []netconf.Assignment, res Resolver, claims map[string]attachment.Key, key attachment.Key,
	podNS netns.NsHandle, sharedClaim func(holder attachment.Key, dev string) (bool, error)) ([]candidate, error) {
	var out []candidate
	seen := map[string]bool{}
	for _, a := range plan {
		d, err := res.LookupRDMA(a.DeviceID)
		if err != nil {
			return nil, lookupError(a.DeviceID, err)
		}
		if holder, ok := claims[d.Name]; ok && holder != key {
			shared := false
			if a.Shared {
				if shared, err = sharedClaim(holder, d.Name); err != nil {
					return nil, err
				}
			}
			if !shared {
				return nil, fmt.Errorf("rdma device %s is claimed by attachment %s: %w", d.Name, holder, ErrDeviceInUse)
			}
		}
		if seen[d.Name] {
			return nil, fmt.Errorf("rdma device %s is named twice: %w", d.Name, ErrDeviceInUse)
		}
		seen[d.Name] = true
		nd := hostNetdev(d)
		if nd == "" {
			return nil, fmt.Errorf("rdma device %s has no netdev in the host netns (already in a pod?): %w", d.Name, ErrDeviceInUse)
		}
		l, err := p.Links.Get(p.HostNS, nd)
		if errors.Is(err, rdma.ErrLinkNotFound) {
			return nil, fmt.Errorf("netdev %s of rdma device %s is not in the host netns (already in a pod?): %w", nd, d.Name, ErrDeviceInUse)
		}
		if err != nil {
			return nil, fmt.Errorf("read netdev %s: %w", nd, err)
		}
		if _, err := p.Links.Get(podNS, a.IfName); err == nil {
			return nil, fmt.Errorf("%q: %w", a.IfName, ErrNameTaken)
		} else if !errors.Is(err, rdma.ErrLinkNotFound) {
			return nil, fmt.Errorf("read pod netdev %q: %w", a.IfName, err)
		}
		if a.Shared {
			c := candidate{dev: d, host: l, podIf: a.IfName, child: childKind(conf, d)}
			if c.child == rdma.ChildIPoIB {
				if c.pkey, err = res.NetdevPKey(l.Name); err != nil {
					return nil, fmt.Errorf("rdma device %s: %w", d.Name, err)
				}
			}
			out = append(out, c)
			continue
		}
		c := candidate{dev: d, host: l, podIf: a.IfName, soft: softType(d)}
		if c.soft != "" && c.soft != "rxe" {
			// The kernel destroys it when its netdev leaves, and only rxe
			// is re-created in the pod.
			return nil, fmt.Errorf("rdma device %s is a %s device: only rxe soft devices can be given to a pod", d.Name, c.soft)
		}
		out = append(out, c)
	}
	return out, nil
}

// netnsMode returns the RDMA netns mode to act on; "auto" asks the kernel.
func (p *Plugin) netnsMode(conf *netconf.Conf) (rdma.NetnsMode, error) {
	if conf.NetnsMode != netconf.ModeAuto {
		return conf.NetnsMode, nil
	}
	m, err := p.RDMA.NetnsMode(p.HostNS)
	if err != nil {
		return "", fmt.Errorf("read rdma netns mode: %w", err)
	}
	return m, nil
}
