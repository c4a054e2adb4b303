package cni

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
)

// Check verifies that every device of the attachment is in the pod netns
// under its name, MAC and MTU, with the addresses prevResult gave it, and
// that its RDMA device is there (moved, or re-created for soft-RoCE and,
// in exclusive mode, moved).
func (p *Plugin) Check(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := p.parse(args)
	log, closeLog := p.logger(conf)
	defer closeLog()
	if err != nil {
		return err
	}
	store := p.store(conf)
	key := attachment.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	rec, err := store.Load(key)
	if errors.Is(err, attachment.ErrNotFound) {
		if conf.Standalone() {
			log.Info("no attachment recorded for a standalone pod: nothing allocated")
			return nil
		}
		return fmt.Errorf("attachment %s: %w", key, ErrNotAttached)
	}
	if err != nil {
		return err
	}
	if !rec.Complete {
		return fmt.Errorf("attachment %s: ADD did not complete: %w", key, ErrNotAttached)
	}
	podNS := openPodNS(log, args.Netns)
	if !podNS.IsOpen() {
		return fmt.Errorf("%w: pod netns %q cannot be opened", ErrBadEnvironment, args.Netns)
	}
	defer func() { _ = podNS.Close() }()
	var rdmaNames []string
	for _, d := range rec.Devices {
		if d.SoftType != "" || d.RDMAExclusive {
			if rdmaNames, err = p.RDMA.List(podNS); err != nil {
				return err
			}
			break
		}
	}
	for _, d := range rec.Devices {
		l, err := p.Links.Get(podNS, d.PodIfName)
		if err != nil {
			return fmt.Errorf("check %s in the pod: %w", d.PodIfName, err)
		}
		if l.MAC != d.PodMAC {
			return fmt.Errorf("check %s: mac is %s, want %s", d.PodIfName, l.MAC, d.PodMAC)
		}
		if conf.MTU != 0 && l.MTU != conf.MTU {
			return fmt.Errorf("check %s: mtu is %d, want %d", d.PodIfName, l.MTU, conf.MTU)
		}
		if !l.Up {
			return fmt.Errorf("check %s: link is down", d.PodIfName)
		}
		want := d.RDMA
		if d.SoftType != "" {
			want = d.PodRDMA
		}
		if d.Child != "" {
			// The RDMA device stays on the host, and the child's parent too.
			if _, err := p.Links.Get(p.HostNS, d.Host.Name); err != nil {
				return fmt.Errorf("check %s: parent netdev %s on the host: %w", d.PodIfName, d.Host.Name, err)
			}
		} else if (d.SoftType != "" || d.RDMAExclusive) && !slices.Contains(rdmaNames, want) {
			return fmt.Errorf("check %s: rdma device %s is not in the pod netns", d.PodIfName, want)
		}
		if err := p.checkAddresses(podNS, conf, d.PodIfName); err != nil {
			return err
		}
		if conf.IPAMType != "" {
			ia := IPAMArgs{ContainerID: args.ContainerID, Netns: args.Netns, IfName: d.PodIfName, Args: args.Args, Path: args.Path}
			if err := p.IPAM.Check(ctx, conf.IPAMType, args.StdinData, ia); err != nil {
				return fmt.Errorf("ipam %s check for %s: %w", conf.IPAMType, d.PodIfName, err)
			}
		}
	}
	return nil
}

// checkAddresses checks that the addresses prevResult gives ifName are on it.
func (p *Plugin) checkAddresses(podNS netns.NsHandle, conf *netconf.Conf, ifName string) error {
	prev := conf.PrevResult
	if prev == nil {
		return nil
	}
	var want []net.IPNet
	for _, ip := range prev.IPs {
		if ip.Interface == nil || *ip.Interface < 0 || *ip.Interface >= len(prev.Interfaces) ||
			prev.Interfaces[*ip.Interface].Name != ifName {
			continue
		}
		want = append(want, ip.Address)
	}
	if len(want) == 0 {
		return nil
	}
	got, err := p.Addrs.List(podNS, ifName)
	if err != nil {
		return err
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g net.IPNet) bool { return g.IP.Equal(w.IP) && g.Mask.String() == w.Mask.String() }) {
			return fmt.Errorf("check %s: address %s is missing", ifName, w.String())
		}
	}
	return nil
}

// Status reports whether the plugin can work on this node: RDMA netlink
// answers, the state dir is writable and, in standalone mode, the kubelet
// answers unless its device checkpoint serves pods without RDMA (in DRA
// mode, the claims dir can be read).
//
// A standalone entry is chained in the node's primary network, whose STATUS
// a runtime (containerd 2.x, cniVersion 1.1.0) turns into the node's
// network readiness: a failure there takes the node NotReady for every pod.
// So there it fails only on what a pod without RDMA needs to pass through
// (the kubelet's answer, or the claims dir, which say the pod has no
// device): RDMA netlink that does not answer (a driver container reloading
// the RDMA stack) and a state dir that cannot be written cost only the pods
// with devices, whose ADD fails loudly. Those are logged as warnings and
// counted in the operation's metric (kube_rdma_cni_operations_total,
// command STATUS, code 50) while the runtime is told success.
func (p *Plugin) Status(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := p.parse(args)
	log, closeLog := p.logger(conf)
	defer closeLog()
	if err != nil {
		return err
	}
	var errs, rdmaOnly []error
	if _, err := p.RDMA.NetnsMode(p.HostNS); err != nil {
		rdmaOnly = append(rdmaOnly, fmt.Errorf("rdma netlink: %w", err))
	}
	if err := (p.store(conf)).Writable(); err != nil {
		rdmaOnly = append(rdmaOnly, err)
	}
	if conf.FromDRA() {
		_, damaged, err := claimrecord.ReadAll(conf.DRAClaimsDir)
		for _, d := range damaged {
			log.Error("dra claim record does not decode; moved aside", "path", d.Path, "movedTo", d.Moved, "err", d.Err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("dra claims: %w", err))
		}
	} else if conf.Standalone() && p.checkpointServes(conf, log) {
		// Pods without RDMA pass through on the kubelet's device
		// checkpoint alone (holdsNone): the kubelet is not asked, and
		// a kubelet that does not answer costs only the pods with devices,
		// whose ADD fails loudly.
	} else if conf.Standalone() || conf.RequirePodResources {
		// A pod the kubelet does not know is an answer: it is there.
		_, err := p.allocated(ctx, conf, podRef{Namespace: "kube-system", Name: "kube-rdma-status-probe"}, log)
		if err != nil && !errors.Is(err, podresources.ErrPodNotFound) {
			errs = append(errs, fmt.Errorf("kubelet PodResources API: %w", err))
		}
	}
	if conf.Standalone() && len(rdmaOnly) > 0 {
		log.Warn("STATUS: pods with RDMA devices of this network cannot be attached now; pods without pass through, "+
			"so STATUS succeeds (the node's network stays ready)", "err", errors.Join(rdmaOnly...))
		p.statusDegraded.Store(uint32(types.ErrPluginNotAvailable))
	} else {
		errs = append(rdmaOnly, errs...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNotAvailable, errors.Join(errs...))
	}
	return nil
}

// GC returns the devices of every recorded attachment that is not in
// cni.dev/valid-attachments and removes its record. It releases the IPAM
// leases of every record of a previous boot and removes those records.
func (p *Plugin) GC(ctx context.Context, args *skel.CmdArgs) error {
	conf, err := p.parse(args)
	log, closeLog := p.logger(conf)
	defer closeLog()
	if err != nil {
		return err
	}
	valid := map[attachment.Key]bool{}
	for _, a := range conf.ValidAttachments {
		valid[attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}] = true
	}
	store := p.store(conf)
	lk := &nodeLock{store: store}
	if err := lk.acquire(); err != nil {
		return err
	}
	defer lk.release()
	recs, prev, lerr := store.List()
	var errs []error
	if lerr != nil {
		errs = append(errs, lerr)
	}
	// Under the node-wide lock: return the devices of each collected
	// attachment and record that. Then, without it: IPAM, which may hang.
	type collected struct {
		rec     attachment.Attachment
		release func()
		err     error
	}
	var done []collected
	defer func() {
		for _, c := range done {
			c.release()
		}
	}()
	// One wait for the whole pass, not one per attachment.
	deadline := p.returnDeadline()
	for _, rec := range recs {
		if valid[rec.Key] || rec.Network != conf.Name {
			continue
		}
		release, ok, err := store.Hold(rec.Key, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("gc %s: %w", rec.Key, err))
			continue
		}
		if !ok {
			log.Info("attachment in flight (an ADD or DEL holds it); not collected", "containerID", rec.ContainerID, "ifName", rec.IfName)
			continue
		}
		// Read again under its own lock: a wait for an earlier one's NIC
		// gave the node-wide lock up, and its DEL may have ended meanwhile.
		cur, err := store.Load(rec.Key)
		if err != nil {
			release()
			if !errors.Is(err, attachment.ErrNotFound) && !errors.Is(err, attachment.ErrStale) {
				errs = append(errs, fmt.Errorf("gc %s: %w", rec.Key, err))
			}
			continue
		}
		rec = cur
		log.Info("garbage-collecting attachment", "containerID", rec.ContainerID, "ifName", rec.IfName)
		podNS := openPodNS(log, rec.Netns)
		rerr := p.returnDevices("GC", podNS, &rec, p.Resolver(conf.SysfsRoot), lk, deadline, log)
		_ = podNS.Close()
		if err := store.Save(rec); err != nil {
			rerr = errors.Join(rerr, err)
		}
		done = append(done, collected{rec: rec, release: release, err: rerr})
	}
	lk.release()
	// Records of a previous boot, of any network: each holds its own IPAM
	// configuration.
	p.releasePrevious(ctx, store, prev, args.Path, log)
	for _, c := range done {
		ipamType, ipamConf := recordedIPAM(c.rec)
		if err := errors.Join(c.err, p.releaseIPAM(ctx, c.rec, ipamType, ipamConf, "", args.Path)); err != nil {
			errs = append(errs, fmt.Errorf("gc %s: %w", c.rec.Key, err))
			continue
		}
		if err := store.Delete(c.rec.Key); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
