package cni

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/cni/state"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// podResourcesTimeout bounds one call to the kubelet.
const podResourcesTimeout = 5 * time.Second

// podRef is the pod named in CNI_ARGS.
type podRef struct{ Namespace, Name string }

func (p podRef) known() bool { return p.Namespace != "" && p.Name != "" }

// parseCNIArgs reads K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS
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
		}
	}
	return p
}

// allocated asks the kubelet for the pod's devices. reachable is false when
// the socket does not exist or does not answer; err is set only for a
// kubelet that answered with an error.
func (p *Plugin) allocated(ctx context.Context, socket string, pod podRef) (devs map[string][]string, reachable bool, err error) {
	if p.PodResources == nil {
		return nil, false, nil
	}
	if _, err := os.Stat(socket); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	c, closeFn, err := p.PodResources(socket)
	if err != nil {
		return nil, false, err
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	devs, err = c.Devices(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return nil, false, fmt.Errorf("ask kubelet %s for the devices of pod %s/%s: %w", socket, pod.Namespace, pod.Name, err)
	}
	return devs, true, nil
}

// selectDevices returns the device IDs this ADD attaches: the deviceID,
// checked against the pod's allocation when the kubelet answers, or in
// standalone mode every device of the resource allocated to the pod.
func (p *Plugin) selectDevices(ctx context.Context, conf *netconf.Conf, pod podRef, res Resolver, log *slog.Logger) ([]string, error) {
	if !conf.Standalone() {
		if !pod.known() {
			return []string{conf.DeviceID}, nil
		}
		alloc, reachable, err := p.allocated(ctx, conf.KubeletSocket, pod)
		if !reachable {
			if err != nil {
				log.Warn("kubelet PodResources not reachable; deviceID not checked", "err", err)
			}
			return []string{conf.DeviceID}, nil
		}
		d, err := res.LookupRDMA(conf.DeviceID)
		if err != nil {
			return nil, lookupError(conf.DeviceID, err)
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
	alloc, reachable, err := p.allocated(ctx, conf.KubeletSocket, pod)
	if err != nil {
		return nil, err
	}
	if !reachable {
		return nil, fmt.Errorf("%w: kubelet PodResources socket %s does not exist", ErrNotAvailable, conf.KubeletSocket)
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
	exclus bool   // move the RDMA device itself
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
func (p *Plugin) resolve(plan []netconf.Assignment, res Resolver, claims map[string]state.Key, key state.Key,
	mode rdma.NetnsMode, podNS netns.NsHandle) ([]candidate, error) {
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
		c.exclus = c.soft == "" && mode == netconf.ModeExclusive
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
