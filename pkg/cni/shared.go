package cni

// Shared pools: a NIC of a shared pool is in every pod holding a slot of
// the pool at once, so its netdev cannot move into one of them. Each pod
// gets a child of the netdev instead where the netconf opts in
// (sharedNetdev: macvlan or ipvlan on Ethernet; an IPoIB child in the
// parent's partition on InfiniBand whichever is set), created directly in
// the pod's netns (rdma.Netdevs.AddChild) and deleted by DEL; the parent and the RDMA device stay on the host. The
// pod's RoCE GIDs are its child's addresses, so rdma_cm resolves through
// it. The plugin learns that a pool is shared from the node's pools file
// (nodepools): in standalone mode the pool of resourceName, with a deviceID
// (Multus) the pool whose slot it is, or whose slot the pod holds for the
// NIC it names. docs/cni.md, "Shared pools".
//
// sharedNetdev none, the default in this release, gives a shared pool's pod
// nothing of the plugin (device nodes only) and writes no record: a record
// with a child is attachment schema 2, which the previous release refuses,
// so children are opt-in until the next release (docs/upgrades.md).

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// readPools reads the node's pools file for the shared-pool checks: a file
// that is missing or torn (moved aside) is no file: no pool is known to be
// shared, and the plugin acts as before shared pools had children.
func readPools(conf *netconf.Conf, log *slog.Logger) (nodepools.File, bool) {
	path := nodepools.Path(conf.AllocDir)
	f, err := nodepools.Read(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("pools file unreadable; no pool known to be shared", "path", path, "err", err)
		}
		return nodepools.File{}, false
	}
	return f, true
}

// sharedResourcePool returns the shared device plugin pool of resourceName
// (<prefix>/<pool>) when the pod holds slots of it.
func sharedResourcePool(conf *netconf.Conf, ids []string, log *slog.Logger) (nodepools.Pool, bool) {
	if len(ids) == 0 {
		return nodepools.Pool{}, false
	}
	i := strings.LastIndexByte(conf.ResourceName, '/')
	f, ok := readPools(conf, log)
	if !ok {
		return nodepools.Pool{}, false
	}
	pool, ok := f.Lookup(conf.ResourceName[i+1:])
	if !ok || pool.Mode != nodepools.ModeShared {
		return nodepools.Pool{}, false
	}
	for _, id := range ids {
		if p, ok := f.SharedSlot(id); !ok || p.Name != pool.Name {
			return nodepools.Pool{}, false
		}
	}
	return pool, true
}

// sharedMembers are the RDMA names, in natural order, of a shared pool's
// devices: every pod holding a slot gets a child on each; none with
// sharedNetdev none.
func sharedMembers(conf *netconf.Conf, pool nodepools.Pool, log *slog.Logger) []string {
	if conf.SharedNetdev == netconf.SharedNone {
		log.Info("sharedNetdev none: a shared pool's pod gets no netdev", "pool", pool.Name)
		return nil
	}
	ids := make([]string, 0, len(pool.Devices))
	for _, d := range pool.Devices {
		ids = append(ids, d.RDMA)
	}
	netconf.SortDevices(ids)
	return ids
}

// sharedSlotPool returns the shared pool of which the deviceID is a slot
// (Multus passes the kubelet's device ID, which for a shared pool is a
// slot, not a NIC).
func sharedSlotPool(conf *netconf.Conf, log *slog.Logger) (nodepools.Pool, bool) {
	f, ok := readPools(conf, log)
	if !ok {
		return nodepools.Pool{}, false
	}
	return f.SharedSlot(conf.DeviceID)
}

// sharedSlotMember is the one NIC a deviceID that is a slot of pool
// attaches: CNI_IFNAME is one interface, so a pool of several NICs is
// refused (code 7) with what to do instead.
func sharedSlotMember(conf *netconf.Conf, pool nodepools.Pool, log *slog.Logger) ([]string, bool, error) {
	if conf.SharedNetdev == netconf.SharedNone {
		log.Info("sharedNetdev none: a shared pool's pod gets no netdev", "pool", pool.Name, "deviceID", conf.DeviceID)
		return nil, false, nil
	}
	if len(pool.Devices) != 1 {
		return nil, false, fmt.Errorf("%w: deviceID %q is a slot of shared pool %s, which has %d devices: one interface "+
			"(CNI_IFNAME) cannot carry them; name one NIC in runtimeConfig.deviceID, or chain the plugin with resourceName",
			netconf.ErrInvalid, conf.DeviceID, pool.Name, len(pool.Devices))
	}
	return []string{pool.Devices[0].RDMA}, true, nil
}

// sharedHolds reports whether one of the pod's device IDs held is a slot of
// a shared pool that has d, and names that pool.
func sharedHolds(conf *netconf.Conf, held []string, d discovery.RDMADevice, log *slog.Logger) (string, bool) {
	if len(held) == 0 {
		return "", false
	}
	f, ok := readPools(conf, log)
	if !ok {
		return "", false
	}
	for _, id := range held {
		pool, ok := f.SharedSlot(id)
		if !ok {
			continue
		}
		single := nodepools.File{Pools: []nodepools.Pool{pool}}
		if _, ok := single.PoolOf(d.Name, d.PCIAddress); ok {
			return pool.Name, true
		}
	}
	return "", false
}

// childKind is the child a shared device's pod gets: IPoIB on InfiniBand
// (macvlan and ipvlan need Ethernet), else sharedNetdev.
func childKind(conf *netconf.Conf, d discovery.RDMADevice) rdma.ChildKind {
	if d.LinkLayer == "InfiniBand" {
		return rdma.ChildIPoIB
	}
	if conf.SharedNetdev == netconf.SharedIPVLAN {
		return rdma.ChildIPVLAN
	}
	return rdma.ChildMacvlan
}

// sharedClaim reports whether the attachment holding dev holds it as a
// child: another child may share it then, a move may not take it.
func sharedClaim(store attachment.Store, holder attachment.Key, dev string) (bool, error) {
	rec, err := store.Load(holder)
	if errors.Is(err, attachment.ErrNotFound) {
		return true, nil // gone since the claims were read: nothing holds it
	}
	if err != nil {
		return false, fmt.Errorf("read attachment %s holding %s: %w", holder, dev, err)
	}
	for _, d := range rec.Devices {
		if d.RDMA == dev && !d.Returned && d.Child == "" {
			return false, nil
		}
	}
	return true, nil
}

// attachChild creates the pod's child of the candidate's netdev in the pod
// under its name (up, MTU and, for macvlan, MAC as configured) and pushes
// its deletion. It returns the child's MTU.
func (p *Plugin) attachChild(podNS netns.NsHandle, d *attachment.Device, c candidate, conf *netconf.Conf, u *undo) (int, error) {
	cfg := rdma.ChildConfig{Kind: c.child, Name: c.podIf, MTU: conf.MTU, PKey: c.pkey}
	if c.child == rdma.ChildMacvlan {
		cfg.MAC = conf.MAC
	}
	l, err := p.Links.AddChild(p.HostNS, c.host.Name, podNS, cfg)
	if err != nil {
		return 0, fmt.Errorf("create %s child of %s in the pod as %s: %w", c.child, c.host.Name, c.podIf, err)
	}
	d.PodMAC = l.MAC
	u.push("delete child "+c.podIf, func() error {
		_, err := p.Links.Delete(podNS, c.podIf, l.MAC)
		return err
	})
	return l.MTU, nil
}

// removeChild deletes d's child in the pod: by name, and by MAC when the
// record has it (a crash between the child's creation and the record's
// second write leaves none; the name was free in the pod before, so the
// link under it is the child). A netns that is gone took its children with
// it, and a child not there is gone already: nothing to give back.
func (p *Plugin) removeChild(podNS netns.NsHandle, d attachment.Device, log *slog.Logger) error {
	if !podNS.IsOpen() {
		log.Info("pod netns is gone; its child netdev went with it", "podIfName", d.PodIfName, "parent", d.Host.Name)
		return nil
	}
	if _, err := p.Links.Delete(podNS, d.PodIfName, d.PodMAC); err != nil {
		return fmt.Errorf("delete %s child %s in the pod: %w", d.Child, d.PodIfName, err)
	}
	return nil
}
