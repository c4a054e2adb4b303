package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// undo is a stack of rollback steps, run last-in first-out.
type undo struct {
	steps []step
}

type step struct {
	what string
	fn   func() error
}

func (u *undo) push(what string, fn func() error) { u.steps = append(u.steps, step{what, fn}) }

func (u *undo) run(log *slog.Logger) error {
	var errs []error
	for i := len(u.steps) - 1; i >= 0; i-- {
		s := u.steps[i]
		if err := s.fn(); err != nil {
			log.Error("rollback step failed", "step", s.what, "err", err)
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
		}
	}
	return errors.Join(errs...)
}

// Add attaches the devices and returns the result (merged with prevResult).
// It prepares first (checks and a plan, nothing changed), then records the
// attachment and applies it, each mutation pushing its undo; on error the
// deferred rollback runs the undo stack and settles the record.
func (p *Plugin) Add(ctx context.Context, args *skel.CmdArgs) (_ *types100.Result, err error) {
	start := time.Now()
	conf, err := p.parse(args)
	log, closeLog := p.logger(conf)
	defer closeLog()
	if err != nil {
		return nil, err
	}
	mark("parse")
	podNS, err := openPodNetns(conf, args)
	if err != nil {
		return nil, err
	}
	defer func() { _ = podNS.Close() }()
	mark("netns")
	log = log.With("containerID", args.ContainerID, "ifName", args.IfName)
	res := memoResolver{r: p.Resolver(conf.SysfsRoot), seen: map[string]lookup{}}
	pod := parseCNIArgs(args.Args)
	planFor, gr, err := p.planDevices(ctx, conf, args, pod, res, log)
	if err != nil {
		return nil, err
	}
	mark("plan")
	if planFor == nil {
		if conf.FromDRA() {
			if conf.PrevResult == nil {
				return nil, errNoClaims(conf, pod)
			}
			log.Info("no DRA claim reserved for the pod; passing prevResult through", "claimsDir", conf.DRAClaimsDir, "podUID", pod.UID)
			return passthrough(conf), nil
		}
		log.Info("no devices of the resource allocated to the pod; passing prevResult through", "resource", conf.ResourceName)
		return passthrough(conf), nil
	}

	store := p.store(conf)
	key := attachment.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	// The attachment's own lock, held to the end: a DEL of it waits, a GC
	// leaves it alone while it is in flight.
	release, _, err := store.Hold(key, true)
	if err != nil {
		return nil, err
	}
	defer release()
	mark("hold")
	// The node-wide lock guards the claims: it is held from reading them to
	// the moves of the devices claimed, not through IPAM, which may hang.
	unlock, err := store.Lock()
	if err != nil {
		return nil, err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	mark("lock")
	cands, prev, err := p.prepareCandidates(conf, store, key, planFor, res, podNS, log)
	if err != nil {
		return nil, err
	}
	mark("links")
	rec := newRecord(conf, args, key, pod, cands)
	if gr != nil {
		if err := requireExclusive(gr, cands); err != nil {
			return nil, err
		}
		rec.Binding = gr.binding()
	}
	// The record goes first: a crash from here on leaves DEL and GC what
	// they need to put the host back. Not fsynced: nothing it names yet
	// outlives a boot (record2 is, before IPAM runs; Store.SaveNoSync).
	if err := store.SaveNoSync(rec); err != nil {
		return nil, err
	}
	mark("record1")
	u := &undo{}
	defer func() {
		// rec is read when the rollback runs, so it sees what apply
		// recorded. The devices stay claimed by the record until the
		// rollback put them back, so it needs no node-wide lock.
		err = settleFailedAdd(err, u, store, rec, key, log)
	}()
	mtus, err := p.attachAll(podNS, &rec, cands, conf, u, log)
	if err != nil {
		return nil, err
	}
	mark("move")
	// Without IPAM and allocation files nothing after this can fail: the
	// record is final here, and one write instead of two saves ~0.7 ms of
	// an ADD (hack/bench-cni.sh, record2/record3).
	final := conf.IPAMType == "" && gr == nil
	rec.Complete = final
	// What the moves recorded (pod names, soft devices) is on disk before
	// the lock goes; fsynced when IPAM runs next, whose lease outlives a
	// boot and which a previous boot's release finds by this record.
	if err := saveRecord(store, rec, conf.IPAMType != ""); err != nil {
		return nil, err
	}
	unlock()
	locked = false
	mark("record2")
	// Before this ADD's IPAM: leases a previous boot left may be what its
	// range lacks.
	p.releasePrevious(ctx, store, prev, args.Path, log)
	result, err := p.buildResult(ctx, conf, args, podNS, &rec, mtus, u)
	if err != nil {
		return nil, err
	}
	mark("result")
	if gr != nil {
		// The containers start after ADD returns: their files are there.
		if err := gr.writeAllocFiles(conf.AllocDir, &rec, u); err != nil {
			return nil, err
		}
	}
	if !final {
		rec.Complete = true
		if err := saveRecord(store, rec, conf.IPAMType != ""); err != nil {
			return nil, err
		}
		mark("record3")
	}
	log.Info("attached", "devices", len(rec.Devices), "elapsed", time.Since(start))
	return result, nil
}

// saveRecord saves rec, fsynced when it names an IPAM lease or one to come
// (durable), else only atomically (Store.SaveNoSync).
func saveRecord(store attachment.Store, rec attachment.Attachment, durable bool) error {
	if durable {
		return store.Save(rec)
	}
	return store.SaveNoSync(rec)
}

// planDevices decides, without the node-wide lock, how the devices are
// found: named by the kubelet or Multus (a fixed plan), or, for a
// gpuAligned pool (gr set), chosen from the claims under the lock. A nil
// planFor means the pod has nothing of the resource: pass through.
func (p *Plugin) planDevices(ctx context.Context, conf *netconf.Conf, args *skel.CmdArgs, pod podRef, res Resolver,
	log *slog.Logger) (planFor func(claims map[string]attachment.Key) ([]netconf.Assignment, error), gr *gpuRequest, err error) {
	if conf.Standalone() && !conf.FromDRA() {
		if gr, err = p.gpuAlignedRequest(ctx, conf, pod, log); err != nil {
			return nil, nil, err
		}
	}
	if gr != nil {
		if gr.size == 0 {
			return nil, nil, nil
		}
		// The names are the same whichever NICs are chosen: fail before the lock.
		if _, err := netconf.PlanNames(conf, args.IfName, make([]string, gr.size)); err != nil {
			return nil, nil, err
		}
		return func(claims map[string]attachment.Key) ([]netconf.Assignment, error) {
			ids, err := p.align(gr, claims, res, log)
			if err != nil {
				return nil, err
			}
			return netconf.PlanNames(conf, args.IfName, ids)
		}, gr, nil
	}
	ids, shared, sharedDRA, err := p.selectDevices(ctx, conf, pod, res, log)
	if err != nil || len(ids) == 0 {
		return nil, nil, err
	}
	plan, err := netconf.PlanNames(conf, args.IfName, ids)
	if err != nil {
		return nil, nil, err
	}
	for i := range plan {
		plan[i].Shared = shared || sharedDRA[plan[i].DeviceID]
	}
	return func(map[string]attachment.Key) ([]netconf.Assignment, error) { return plan, nil }, nil, nil
}

// openPodNetns checks the config and CNI environment and opens the pod's netns.
func openPodNetns(conf *netconf.Conf, args *skel.CmdArgs) (netns.NsHandle, error) {
	if err := conf.RequireDevice(); err != nil {
		return 0, err
	}
	if args.Netns == "" {
		return 0, fmt.Errorf("%w: CNI_NETNS is empty", ErrBadEnvironment)
	}
	if err := netconf.ValidIfName(args.IfName); err != nil {
		return 0, fmt.Errorf("%w: CNI_IFNAME: %w", ErrBadEnvironment, err)
	}
	podNS, err := netns.GetFromPath(args.Netns)
	if err != nil {
		return 0, fmt.Errorf("%w: open pod netns %s: %w", ErrBadEnvironment, args.Netns, err)
	}
	return podNS, nil
}

// prepareCandidates checks the attachment is new and resolves the plan
// (planFor makes it from the claims) into unclaimed candidates, marking
// which RDMA devices move; it changes nothing. It also returns the records
// of a previous boot the claims were read beside, whose leases ADD releases.
func (p *Plugin) prepareCandidates(conf *netconf.Conf, store attachment.Store, key attachment.Key,
	planFor func(claims map[string]attachment.Key) ([]netconf.Assignment, error), res Resolver,
	podNS netns.NsHandle, log *slog.Logger) ([]candidate, []attachment.Attachment, error) {
	if _, err := store.Load(key); err == nil {
		return nil, nil, fmt.Errorf("attachment %s already exists (DEL it first): %w", key, ErrDeviceInUse)
	}
	claims, prev, err := store.Claimed()
	if err != nil {
		return nil, nil, fmt.Errorf("read claims: %w", err)
	}
	plan, err := planFor(claims)
	if err != nil {
		return nil, nil, err
	}
	mark("claims")
	cands, err := p.resolve(conf, plan, res, claims, key, podNS, func(holder attachment.Key, dev string) (bool, error) {
		return sharedClaim(store, holder, dev)
	})
	if err != nil {
		return nil, nil, err
	}
	if err := p.refuseHostNetdevs(conf, cands, log); err != nil {
		return nil, nil, err
	}
	// Only now the kernel is asked (auto mode), so that a node without
	// RDMA netlink still gets the checks' own codes.
	if err := p.markExclusive(conf, cands); err != nil {
		return nil, nil, err
	}
	return cands, prev, nil
}

// refuseHostNetdevs refuses a device whose host netdev the host itself uses,
// since a move into the pod's namespace takes that from the host (the kernel
// drops the netdev's addresses and routes and releases it from its master,
// and DEL does not put them back):
//   - a default route of the host leaves through it: the node's own uplink,
//     whatever pool or deviceID names it, refused in every case;
//   - it has addresses of its own (global or site scope) or is a port of a
//     bond, team, bridge, Open vSwitch bridge or VRF: refused unless the
//     device's pool allows it (allowConfiguredNetdevs, published in the
//     node's pools file).
//
// A child leaves its parent where it is: not refused.
func (p *Plugin) refuseHostNetdevs(conf *netconf.Conf, cands []candidate, log *slog.Logger) error {
	var pools *nodepools.File
	for _, c := range cands {
		if c.child != "" {
			continue
		}
		u, err := p.Addrs.HostUse(p.HostNS, c.host.Name)
		if err != nil {
			return fmt.Errorf("read what the host has configured on netdev %s: %w", c.host.Name, err)
		}
		if u.DefaultRoute {
			return fmt.Errorf("rdma device %s: netdev %s carries the host's default route: %w", c.dev.Name, c.host.Name, ErrDeviceInUse)
		}
		if !u.Configured() {
			continue
		}
		if pools == nil {
			f, _ := readPools(conf, log)
			pools = &f
		}
		name, inPool := pools.PoolOf(c.dev.Name, c.dev.PCIAddress)
		pool, _ := pools.Lookup(name)
		if inPool && pool.AllowConfiguredNetdevs {
			log.Warn("moving a netdev the host has configured into the pod: its pool allows it; the host loses its addresses and master for good",
				"rdmaDevice", c.dev.Name, "netdev", c.host.Name, "pool", name, "hostUse", u.String())
			continue
		}
		which := "it is in no pool of this node's pools file"
		if inPool {
			which = "its pool " + name + " does not set allowConfiguredNetdevs"
		}
		return fmt.Errorf("rdma device %s: netdev %s is in use by the host (%s) and a move into the pod would take that from it; %s: %w",
			c.dev.Name, c.host.Name, u, which, ErrDeviceInUse)
	}
	return nil
}

// newRecord builds the attachment record for the candidates, before any move.
func newRecord(conf *netconf.Conf, args *skel.CmdArgs, key attachment.Key, pod podRef, cands []candidate) attachment.Attachment {
	rec := attachment.Attachment{Key: key, Netns: args.Netns, CNIVersion: conf.CNIVersion, Network: conf.Name}
	if pod.known() {
		rec.Pod = &attachment.PodRef{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	}
	if conf.IPAMType != "" {
		rec.IPAMConf = args.StdinData
	}
	for _, c := range cands {
		d := attachment.Device{
			RDMA: c.dev.Name, Kind: string(c.dev.Kind), PCIAddress: c.dev.PCIAddress, AuxDevice: c.dev.AuxDevice, PodIfName: c.podIf, SoftType: c.soft, RDMAExclusive: c.exclus, Child: string(c.child),
			Host: attachment.HostLink{Name: c.host.Name, Index: c.host.Index, MTU: c.host.MTU, MAC: c.host.MAC, Up: c.host.Up},
		}
		if conf.MAC != nil {
			d.PodMAC = conf.MAC.String() // so DEL finds it by MAC after a crash
		}
		rec.Devices = append(rec.Devices, d)
	}
	return rec
}

// settleFailedAdd runs the undo stack when err is set and deletes the record,
// or keeps it for DEL if the rollback was incomplete; it returns the final error.
func settleFailedAdd(err error, u *undo, store attachment.Store, rec attachment.Attachment, key attachment.Key, log *slog.Logger) error {
	if err == nil {
		return nil
	}
	if uerr := u.run(log); uerr != nil {
		// Keep the record: DEL or GC can finish putting the host back.
		err = errors.Join(err, fmt.Errorf("rollback incomplete, record kept for DEL: %w", uerr))
		if serr := store.Save(rec); serr != nil {
			err = errors.Join(err, serr)
		}
		return err
	}
	if derr := store.Delete(key); derr != nil {
		err = errors.Join(err, derr)
	}
	return err
}

// attachAll moves every candidate into the pod in order and returns the
// pod interfaces' MTUs.
func (p *Plugin) attachAll(podNS netns.NsHandle, rec *attachment.Attachment, cands []candidate, conf *netconf.Conf,
	u *undo, log *slog.Logger) ([]int, error) {
	mtus := make([]int, len(cands))
	for i, c := range cands {
		var err error
		if mtus[i], err = p.attach(podNS, &rec.Devices[i], c, conf, u, log); err != nil {
			return nil, err
		}
	}
	return mtus, nil
}

// buildResult adds the pod interfaces to the passed-through result and runs
// IPAM for each device when configured, merging its addresses, routes and DNS.
func (p *Plugin) buildResult(ctx context.Context, conf *netconf.Conf, args *skel.CmdArgs, podNS netns.NsHandle,
	rec *attachment.Attachment, mtus []int, u *undo) (*types100.Result, error) {
	// The interface mtu field is 1.1.0's; older results do not have it.
	hasMTU, _ := version.GreaterThanOrEqualTo(conf.CNIVersion, "1.1.0")

	result := passthrough(conf)
	for i := range rec.Devices {
		d := &rec.Devices[i]
		idx := len(result.Interfaces)
		iface := &types100.Interface{Name: d.PodIfName, Mac: d.PodMAC, Sandbox: args.Netns, PciID: d.PCIAddress}
		if hasMTU {
			iface.Mtu = mtus[i]
		}
		result.Interfaces = append(result.Interfaces, iface)
		if conf.IPAMType == "" {
			continue
		}
		r100, err := p.addIPAM(ctx, conf, args, podNS, d, idx, u)
		if err != nil {
			return nil, err
		}
		result.IPs = append(result.IPs, r100.IPs...)
		result.Routes = append(result.Routes, r100.Routes...)
		if len(result.DNS.Nameservers) == 0 {
			result.DNS = r100.DNS
		}
	}
	return result, nil
}

// addIPAM runs IPAM ADD for one pod interface (pushing its release) and
// configures the addresses and routes it returns on that interface.
func (p *Plugin) addIPAM(ctx context.Context, conf *netconf.Conf, args *skel.CmdArgs, podNS netns.NsHandle,
	d *attachment.Device, idx int, u *undo) (*types100.Result, error) {
	ia := IPAMArgs{ContainerID: args.ContainerID, Netns: args.Netns, IfName: d.PodIfName, Args: args.Args, Path: args.Path}
	r, err := p.IPAM.Add(ctx, conf.IPAMType, args.StdinData, ia)
	if err != nil {
		return nil, fmt.Errorf("ipam %s add for %s: %w", conf.IPAMType, d.PodIfName, err)
	}
	u.push("release ipam for "+d.PodIfName, func() error {
		return p.IPAM.Del(context.WithoutCancel(ctx), conf.IPAMType, args.StdinData, ia)
	})
	d.IPAM = true
	r100, err := types100.NewResultFromResult(r)
	if err != nil {
		return nil, fmt.Errorf("convert ipam result: %w", err)
	}
	for _, ip := range r100.IPs {
		ip.Interface = types100.Int(idx)
		d.IPs = append(d.IPs, ip.Address.String())
	}
	if err := p.Addrs.Configure(podNS, d.PodIfName, r100.IPs, r100.Routes); err != nil {
		return nil, fmt.Errorf("configure %s: %w", d.PodIfName, err)
	}
	return r100, nil
}

// markExclusive sets which candidates' RDMA devices move with them: the
// hardware ones, in exclusive mode. Shared ones (children) never move; a
// soft device is re-created on its netdev in the pod and put where the pod
// sees it whatever the mode (softIntoPod), so the mode is not asked for
// when every candidate is soft or shared.
func (p *Plugin) markExclusive(conf *netconf.Conf, cands []candidate) error {
	if !slices.ContainsFunc(cands, func(c candidate) bool { return c.soft == "" && c.child == "" }) {
		return nil
	}
	mode, err := p.netnsMode(conf)
	if err != nil {
		return err
	}
	for i := range cands {
		cands[i].exclus = cands[i].soft == "" && cands[i].child == "" && mode == netconf.ModeExclusive
	}
	return nil
}

func passthrough(conf *netconf.Conf) *types100.Result {
	if conf.PrevResult != nil {
		return conf.PrevResult
	}
	return &types100.Result{CNIVersion: types100.ImplementedSpecVersion, DNS: types.DNS{}}
}

// attach moves one device into the pod and pushes the steps that undo it.
// It returns the MTU the pod interface has.
func (p *Plugin) attach(podNS netns.NsHandle, d *attachment.Device, c candidate, conf *netconf.Conf, u *undo, log *slog.Logger) (int, error) {
	if c.child != "" {
		return p.attachChild(podNS, d, c, conf, u)
	}
	moved, err := p.Links.Move(p.HostNS, c.host, podNS, rdma.LinkConfig{Name: c.podIf, MTU: conf.MTU, MAC: conf.MAC, Up: true})
	if err != nil {
		err = fmt.Errorf("move netdev %s into the pod as %s: %w", c.host.Name, c.podIf, err)
		if c.soft != "" {
			// The netdev is home, but it may have left and come back, which
			// destroys its soft device: make sure it has one.
			if _, serr := p.addSoft(p.HostNS, c.dev.Name, c.host.Name, false); serr != nil {
				err = errors.Join(err, fmt.Errorf("re-create %s on %s: %w", c.dev.Name, c.host.Name, serr))
			}
		}
		return 0, err
	}
	d.PodMAC = moved.MAC
	dev := *d
	u.push("return netdev "+c.host.Name, func() error {
		_, err := p.returnNetdev(podNS, &dev, nil, log)
		return err
	})
	if c.soft != "" {
		// The kernel destroyed the soft device when its netdev left.
		name, err := p.addSoft(podNS, c.dev.Name, c.podIf, true)
		if err != nil {
			return 0, fmt.Errorf("re-create %s device %s on %s in the pod: %w", c.soft, c.dev.Name, c.podIf, err)
		}
		d.PodRDMA = name
		if name != c.dev.Name {
			log.Warn("soft rdma device name taken; created under another name", "want", c.dev.Name, "got", name)
		}
		if err := p.softIntoPod(podNS, d, c, name, u); err != nil {
			return 0, err
		}
	}
	if c.exclus {
		if err := p.RDMA.Move(p.HostNS, c.dev.Name, podNS); err != nil {
			return 0, fmt.Errorf("move rdma device %s into the pod: %w", c.dev.Name, err)
		}
		u.push("return rdma device "+c.dev.Name, func() error { return p.RDMA.Move(podNS, c.dev.Name, p.HostNS) })
	}
	return moved.MTU, nil
}

// softIntoPod makes sure the pod sees the soft device name, just made on
// the pod's netdev from a socket in the pod's netns, and records whether
// it lives in the pod's netns (d.RDMAExclusive, for DEL). In shared mode
// every netns sees it. In exclusive mode the kernel registers a new rxe
// device in the initial netns whatever the socket's (7.3 does), where the
// pod cannot see it: it is moved into the pod's. Then the device's
// deletion, wherever it is, is pushed, so that the rollback's return of
// the netdev re-creates the host's device at once instead of racing the
// kernel's asynchronous destruction of this one.
func (p *Plugin) softIntoPod(podNS netns.NsHandle, d *attachment.Device, c candidate, name string, u *undo) error {
	podNames, err := p.RDMA.List(podNS)
	if err != nil {
		return fmt.Errorf("list rdma devices in the pod: %w", err)
	}
	inPod := slices.Contains(podNames, name)
	if inPod {
		hostNames, err := p.RDMA.List(p.HostNS)
		if err != nil {
			return fmt.Errorf("list rdma devices on the host: %w", err)
		}
		if slices.Contains(hostNames, name) {
			return nil // shared mode
		}
	}
	d.RDMAExclusive = true
	u.push("delete "+c.soft+" device "+name, func() error {
		err := p.RDMA.DelSoft(podNS, name)
		if errors.Is(err, rdma.ErrDeviceNotFound) {
			err = p.RDMA.DelSoft(p.HostNS, name)
		}
		if errors.Is(err, rdma.ErrDeviceNotFound) {
			return nil // gone with its netdev
		}
		return err
	})
	if inPod {
		return nil
	}
	if err := p.RDMA.Move(p.HostNS, name, podNS); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("%w (this kernel cannot move %s devices between network namespaces: use the shared RDMA netns mode for soft-RoCE)", err, c.soft)
		}
		return fmt.Errorf("move %s device %s into the pod: %w", c.soft, name, err)
	}
	return nil
}

// addSoft creates a soft-RoCE device called name on netdev in ns. The
// kernel destroys the device a netdev had when it moved asynchronously, so
// the name may still be held for a moment: retry until SoftRDMAWait. When
// it stays taken, fallback picks another name; without fallback the name is
// taken to be the device wanted (already re-created) and nothing is done.
func (p *Plugin) addSoft(ns netns.NsHandle, name, netdev string, fallback bool) (string, error) {
	deadline := time.Now().Add(p.SoftRDMAWait)
	for {
		err := p.RDMA.AddRxe(ns, name, netdev)
		if err == nil {
			return name, nil
		}
		// EEXIST: the netdev has one, or (rxe) the name is taken; ENFILE:
		// ib_core's "name taken".
		if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.ENFILE) {
			return "", err
		}
		if time.Now().After(deadline) {
			if !fallback {
				return name, nil
			}
			alt := name + "_" + netdev
			if err := p.RDMA.AddRxe(ns, alt, netdev); err != nil {
				return "", err
			}
			return alt, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// memoResolver remembers lookups for the length of one command.
type memoResolver struct {
	r    Resolver
	seen map[string]lookup
}

type lookup struct {
	d   discovery.RDMADevice
	err error
}

func (m memoResolver) LookupRDMA(id string) (discovery.RDMADevice, error) {
	if l, ok := m.seen[id]; ok {
		return l.d, l.err
	}
	d, err := m.r.LookupRDMA(id)
	m.seen[id] = lookup{d, err}
	return d, err
}

func (m memoResolver) FunctionNetdevs(pciAddr, auxDev string) (bool, []string, error) {
	return m.r.FunctionNetdevs(pciAddr, auxDev)
}

func (m memoResolver) NetdevPKey(name string) (uint16, error) { return m.r.NetdevPKey(name) }
