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
func (p *Plugin) selectDevices(ctx context.Context, conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) ([]string, error) {
	if conf.FromDRA() {
		return p.claimedDevices(conf, pod, res, log)
	}
	if !conf.Standalone() {
		if !pod.known() && conf.RequirePodResources {
			return nil, fmt.Errorf("%w: requirePodResources needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS", ErrBadEnvironment)
		}
		// A device that does not exist is 100 whatever the kubelet says.
		d, err := res.LookupRDMA(conf.DeviceID)
		if err != nil {
			return nil, lookupError(conf.DeviceID, err)
		}
		if err := requireInPool(conf, d, log); err != nil {
			return nil, err
		}
		if !pod.known() {
			return []string{conf.DeviceID}, nil
		}
		alloc, err := p.allocated(ctx, conf, pod, log)
		switch {
		case errors.Is(err, errNoKubeletSocket) && conf.RequirePodResources:
			return nil, fmt.Errorf("%w: deviceID %q cannot be checked against the pod's allocation (requirePodResources): %w",
				ErrNotAvailable, conf.DeviceID, err)
		case errors.Is(err, errNoKubeletSocket):
			log.Warn("kubelet PodResources socket does not exist; deviceID not checked against the pod's allocation",
				"socket", conf.KubeletSocket)
			return []string{conf.DeviceID}, nil
		case errors.Is(err, podresources.ErrPodNotFound):
			// At sandbox creation the kubelet knows the pod: a pod it does
			// not know has nothing allocated by it (wrong CNI_ARGS, or
			// another kubelet's socket).
			return nil, fmt.Errorf("deviceID %q: %w %s/%s: %w", conf.DeviceID, ErrNotAllocated, pod.Namespace, pod.Name, err)
		case err != nil:
			return nil, fmt.Errorf("check deviceID %q against the pod's allocation: %w", conf.DeviceID, err)
		}
		for name, ids := range alloc {
			if conf.ResourceName != "" && name != conf.ResourceName {
				continue
			}
			for _, id := range ids {
				if sameDevice(id, conf.DeviceID, d) {
					return []string{conf.DeviceID}, nil
				}
			}
		}
		return nil, fmt.Errorf("deviceID %q (rdma device %s): %w %s/%s", conf.DeviceID, d.Name, ErrNotAllocated, pod.Namespace, pod.Name)
	}
	if !pod.known() {
		return nil, fmt.Errorf("%w: resourceName mode needs K8S_POD_NAMESPACE and K8S_POD_NAME in CNI_ARGS", ErrBadEnvironment)
	}
	alloc, err := p.allocated(ctx, conf, pod, log)
	switch {
	case errors.Is(err, errNoKubeletSocket):
		return nil, fmt.Errorf("%w: %w", ErrNotAvailable, err)
	case errors.Is(err, podresources.ErrPodNotFound):
		log.Warn("kubelet does not know the pod; it has no devices allocated", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	// Name the devices by their RDMA names, sorted, so that a pod's
	// interfaces come in the same order however the kubelet lists them.
	var ids []string
	for _, id := range alloc[conf.ResourceName] {
		if d, err := res.LookupRDMA(id); err == nil {
			id = d.Name
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	netconf.SortDevices(ids)
	return ids, nil
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
func (p *Plugin) resolve(plan []netconf.Assignment, res Resolver, claims map[string]attachment.Key, key attachment.Key,
	podNS netns.NsHandle) ([]candidate, error) {
	var out []candidate
	seen := map[string]bool{}
	for _, a := range plan {
		d, err := res.LookupRDMA(a.DeviceID)
		if err != nil {
			return nil, lookupError(a.DeviceID, err)
		}
		if holder, ok := claims[d.Name]; ok && holder != key {
			return nil, fmt.Errorf("rdma device %s is claimed by attachment %s: %w", d.Name, holder, ErrDeviceInUse)
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
