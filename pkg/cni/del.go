package cni

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// Del returns the attachment's devices to the host as they were, releases
// IPAM and removes the record. It succeeds when there is nothing to do: a
// second DEL, a DEL without ADD, a DEL with no or a gone netns.
func (p *Plugin) Del(ctx context.Context, args *skel.CmdArgs) error {
	start := time.Now()
	conf, err := p.parse(args)
	log, closeLog := p.logger(conf)
	defer closeLog()
	if err != nil {
		return err
	}
	mark("parse")
	log = log.With("containerID", args.ContainerID, "ifName", args.IfName)
	store := p.store(conf)
	key := attachment.Key{ContainerID: args.ContainerID, IfName: args.IfName}
	// An ADD of the same attachment still in flight finishes first.
	release, _, err := store.Hold(key, true)
	if err != nil {
		return err
	}
	defer release()
	mark("hold")
	lk := &nodeLock{store: store}
	if err := lk.acquire(); err != nil {
		return err
	}
	defer lk.release()
	mark("lock")
	rec, err := store.Load(key)
	if errors.Is(err, attachment.ErrStale) {
		lk.release()
		// An attachment of a previous boot (the runtime cleaning up its
		// sandboxes after a reboot): its devices are on the host again, its
		// IPAM lease is not released.
		if prev, perr := store.LoadPrevious(key); perr == nil {
			ipamType, ipamConf := conf.IPAMType, args.StdinData
			if ipamType == "" {
				ipamType, ipamConf = recordedIPAM(prev)
			}
			return p.settlePrevious(ctx, store, prev, ipamType, ipamConf, args.Path, log)
		}
	}
	if errors.Is(err, attachment.ErrNotFound) {
		lk.release()
		return p.releaseUnrecorded(ctx, conf, args, log)
	}
	if err != nil {
		return err
	}
	mark("load")
	podNS := openPodNS(log, args.Netns, rec.Netns)
	defer func() { _ = podNS.Close() }()
	mark("netns")
	ipamType, ipamConf := conf.IPAMType, args.StdinData
	if ipamType == "" {
		ipamType, ipamConf = recordedIPAM(rec)
	}
	rerr := p.returnDevices("DEL", podNS, &rec, p.Resolver(conf.SysfsRoot), lk, p.returnDeadline(), log)
	mark("move")
	if ipamType != "" || rerr != nil {
		// The devices returned are no longer claimed from here on, while
		// IPAM (which may hang) runs without the node-wide lock. A device
		// not back yet keeps its claim, and the time its wait began
		// (NetdevGiveUp counts from it across DELs).
		if err := store.Save(rec); err != nil {
			rerr = errors.Join(rerr, err)
		}
	}
	lk.release()
	ierr := p.releaseIPAM(ctx, rec, ipamType, ipamConf, args.Args, args.Path)
	mark("ipam")
	if err := errors.Join(rerr, ierr); err != nil {
		return err // the record stays for the next DEL or GC
	}
	if err := store.Delete(key); err != nil {
		return err
	}
	mark("record")
	log.Info("detached", "devices", len(rec.Devices), "elapsed", time.Since(start))
	return nil
}

// releaseUnrecorded runs IPAM DEL for an attachment with no record (an
// ADD that never got that far, or whose record was lost), under each pod
// interface name its ADD would have used: IPAM DEL of what the IPAM plugin
// does not hold succeeds (the CNI spec), so a lease left without a record
// is released and nothing else happens. With a deviceID the name is
// CNI_IFNAME. A standalone attachment's are net1, net2, ... or
// interfaceNames, as many as the pod had devices, which only its ADD's
// result says: the runtime passes it as prevResult (spec 0.4.0 and later),
// and the interfaces of it in the pod that are not CNI_IFNAME and are
// named as ADD names them are ours. Without prevResult, the configured
// interfaceNames; without either, the names are unknown and nothing is
// released (logged).
func (p *Plugin) releaseUnrecorded(ctx context.Context, conf *netconf.Conf, args *skel.CmdArgs, log *slog.Logger) error {
	if conf.IPAMType == "" {
		return nil
	}
	names := []string{args.IfName}
	if conf.Standalone() {
		names = unrecordedNames(conf, args)
		if len(names) == 0 {
			if conf.PrevResult == nil {
				log.Info("no record, no prevResult and no interfaceNames: pod interface names unknown, IPAM DEL not run")
			}
			return nil
		}
	}
	var errs []error
	for _, name := range slices.Backward(names) {
		ia := IPAMArgs{ContainerID: args.ContainerID, Netns: args.Netns, IfName: name, Args: args.Args, Path: args.Path}
		if err := p.IPAM.Del(ctx, conf.IPAMType, args.StdinData, ia); err != nil {
			errs = append(errs, fmt.Errorf("ipam %s del for %s: %w", conf.IPAMType, name, err))
		}
	}
	return errors.Join(errs...)
}

// unrecordedNames are the pod interface names a standalone ADD may have
// given IPAM, without its record (see releaseUnrecorded).
func unrecordedNames(conf *netconf.Conf, args *skel.CmdArgs) []string {
	if conf.PrevResult == nil {
		return conf.InterfaceNames
	}
	var names []string
	for _, i := range conf.PrevResult.Interfaces {
		if i.Sandbox == "" || i.Name == args.IfName || slices.Contains(names, i.Name) {
			continue
		}
		if len(conf.InterfaceNames) > 0 && slices.Contains(conf.InterfaceNames, i.Name) ||
			len(conf.InterfaceNames) == 0 && planned(i.Name) {
			names = append(names, i.Name)
		}
	}
	return names
}

// planned reports whether name is one netconf.PlanNames makes without
// interfaceNames: "net" and a decimal number.
func planned(name string) bool {
	n, ok := strings.CutPrefix(name, "net")
	return ok && n != "" && strings.Trim(n, "0123456789") == ""
}

// openPodNS opens the first of the paths that still is a namespace; a
// closed handle when none is (the netns is gone or was never given).
func openPodNS(log *slog.Logger, paths ...string) netns.NsHandle {
	for i, path := range paths {
		if path == "" || slices.Contains(paths[:i], path) {
			continue
		}
		ns, err := netns.GetFromPath(path)
		if err == nil {
			return ns
		}
		log.Info("pod netns is gone", "netns", path, "err", err)
	}
	return netns.None()
}

func recordedIPAM(rec attachment.Attachment) (string, []byte) {
	if len(rec.IPAMConf) == 0 {
		return "", nil
	}
	var c struct {
		IPAM struct {
			Type string `json:"type"`
		} `json:"ipam"`
	}
	if json.Unmarshal(rec.IPAMConf, &c) != nil {
		return "", nil
	}
	return c.IPAM.Type, rec.IPAMConf
}

// returnDevices returns every device of rec not yet returned to the host
// (deletes a shared device's child) and marks it Returned, best effort: it goes on after an error and
// returns them all. A NIC not in the pod netns is looked for on the host,
// also as its function's one netdev (res: a NIC re-probed while its pod ran
// has another name and MAC). When the pod netns is gone, NICs still on
// their way back are waited for until deadline (returnDeadline), and never
// past NetdevGiveUp from the first wait for them (see awaitOnHost); lk, the
// node-wide lock the caller holds (nil: none), is given up for the wait.
func (p *Plugin) returnDevices(cmd string, podNS netns.NsHandle, rec *attachment.Attachment, res Resolver, lk *nodeLock, deadline time.Time,
	log *slog.Logger) error {
	var errs []error
	for i := len(rec.Devices) - 1; i >= 0; i-- {
		d := &rec.Devices[i]
		if d.Returned {
			continue
		}
		if d.Child != "" {
			// Nothing to give back: the parent never left the host.
			err := p.removeChild(podNS, *d, log)
			d.Returned = err == nil
			errs = append(errs, err)
			continue
		}
		var derrs []error
		if d.RDMAExclusive && podNS.IsOpen() && d.SoftType != "" {
			// Deleted in the pod, so that returnNetdev re-creates the
			// host's device at once (not after the kernel destroyed it
			// when the netdev left).
			if err := p.RDMA.DelSoft(podNS, cmp.Or(d.PodRDMA, d.RDMA)); err != nil && !errors.Is(err, rdma.ErrDeviceNotFound) {
				derrs = append(derrs, fmt.Errorf("delete %s device %s in the pod: %w", d.SoftType, cmp.Or(d.PodRDMA, d.RDMA), err))
			}
		} else if d.RDMAExclusive && podNS.IsOpen() {
			names, err := p.RDMA.List(podNS)
			if err != nil {
				derrs = append(derrs, err)
			} else if slices.Contains(names, d.RDMA) {
				if err := p.RDMA.Move(podNS, d.RDMA, p.HostNS); err != nil {
					derrs = append(derrs, fmt.Errorf("return rdma device %s: %w", d.RDMA, err))
				}
			}
			// Otherwise it is home already, or the kernel returned it with
			// the netns.
		}
		name, err := p.returnNetdev(podNS, d, &waitFor{res: res, lock: lk, deadline: deadline, cmd: cmd, rec: rec}, log)
		if err != nil {
			derrs = append(derrs, err)
		} else if name != "" && name != d.Host.Name {
			log.Warn("host name of the netdev was taken; returned under a temporary name", "want", d.Host.Name, "got", name)
		}
		d.Returned = len(derrs) == 0
		errs = append(errs, derrs...)
	}
	return errors.Join(errs...)
}

// returnDeadline is the end of the wait of one DEL, GC or reclaim pass
// for the NICs it finds on their way back: NetdevReturnWait from now.
func (p *Plugin) returnDeadline() time.Time { return time.Now().Add(p.NetdevReturnWait) }

// nodeLock is the node-wide lock of the state directory as a DEL, GC or
// reclaim pass holds it, which it gives up while it waits for a NIC: a
// device not back yet stays claimed by its record meanwhile, so no ADD
// takes it, and every other ADD, DEL and GC of the node goes on.
type nodeLock struct {
	store  attachment.Store
	unlock func()
}

func (l *nodeLock) acquire() error {
	if l == nil || l.unlock != nil {
		return nil
	}
	unlock, err := l.store.Lock()
	if err != nil {
		return err
	}
	l.unlock = unlock
	return nil
}

func (l *nodeLock) release() {
	if l != nil && l.unlock != nil {
		l.unlock()
		l.unlock = nil
	}
}

// waitFor says whether and how long returnNetdev waits for a NIC that is
// not on the host yet: res is nil when it does not (the pod netns is open,
// or an ADD's rollback).
type waitFor struct {
	res      Resolver
	lock     *nodeLock
	deadline time.Time
	// cmd (DEL, GC, reclaim) and rec name a give-up in the daemon's spool.
	cmd string
	rec *attachment.Attachment
}

// releaseIPAM releases what IPAM holds for each pod interface of rec, best
// effort. IPAM DEL of an address it does not hold succeeds (the CNI spec),
// so a release repeated after a crash is harmless.
func (p *Plugin) releaseIPAM(ctx context.Context, rec attachment.Attachment, ipamType string, ipamConf []byte, cniArgs, cniPath string) error {
	if ipamType == "" {
		return nil
	}
	var errs []error
	for _, d := range slices.Backward(rec.Devices) {
		ia := IPAMArgs{ContainerID: rec.ContainerID, Netns: rec.Netns, IfName: d.PodIfName, Args: cniArgs, Path: cniPath}
		if err := p.IPAM.Del(ctx, ipamType, ipamConf, ia); err != nil {
			errs = append(errs, fmt.Errorf("ipam %s del for %s: %w", ipamType, d.PodIfName, err))
		}
	}
	return errors.Join(errs...)
}

// tempName is the host name a returned netdev gets when its own is taken.
func tempName(d attachment.Device) string {
	sum := sha256.Sum256([]byte(d.RDMA + "/" + d.Host.Name))
	return "krdma" + hex.EncodeToString(sum[:5])
}

// isOurs reports whether a host link is the device of d.
func isOurs(l rdma.Link, d attachment.Device) bool {
	return l.MAC != "" && (l.MAC == d.Host.MAC || l.MAC == d.PodMAC)
}

// kernelName matches the "devN" name the kernel gives a netdev it returns
// from a dying netns when its name is taken.
func kernelName(name string) bool {
	n, ok := strings.CutPrefix(name, "dev")
	_, err := strconv.Atoi(n)
	return ok && err == nil
}

// returnNetdev brings d's netdev back to the host under its original name
// (a temporary one when that is taken), MTU, MAC and up state, and
// re-creates its soft-RoCE device. It finds the netdev in the pod netns or,
// when the pod netns is gone or no longer has it, on the host (already
// returned, or returned by the kernel when the netns died): by MAC, or by
// its function's netdev (findOnHost). It returns the host name used, ""
// when the netdev no longer exists.
//
// With w.res set and the pod netns gone, a hardware NIC not found on the
// host whose function is still on the node is on its way back and is
// waited for (awaitOnHost); with the pod netns open nothing is waited for
// (the netdev is in the pod, on the host, or gone).
func (p *Plugin) returnNetdev(podNS netns.NsHandle, d *attachment.Device, w *waitFor, log *slog.Logger) (string, error) {
	mac, _ := net.ParseMAC(d.Host.MAC)
	want := rdma.LinkConfig{Name: d.Host.Name, MTU: d.Host.MTU, MAC: mac, Up: d.Host.Up}
	var res Resolver
	if w != nil {
		res = w.res
	}
	var podLink rdma.Link
	inPod := false
	if podNS.IsOpen() {
		l, err := p.Links.Get(podNS, d.PodIfName)
		switch {
		case err == nil:
			podLink, inPod = l, true
		case !errors.Is(err, rdma.ErrLinkNotFound):
			return "", fmt.Errorf("read %s in the pod: %w", d.PodIfName, err)
		}
	}
	mark("links")
	if inPod {
		want.Name = p.freeHostName(*d, -1)
		if _, err := p.Links.Move(podNS, podLink, p.HostNS, want); err != nil {
			return "", fmt.Errorf("return netdev %s to the host as %s: %w", d.PodIfName, want.Name, err)
		}
	} else {
		l, ok, err := p.findOnHost(*d, res)
		if err != nil {
			return "", err
		}
		if !ok && res != nil && !podNS.IsOpen() {
			if l, ok, err = p.awaitOnHost(d, w, log); err != nil {
				return "", err
			}
		}
		if !ok {
			log.Warn("netdev no longer exists; nothing to return", "netdev", d.Host.Name, "podIfName", d.PodIfName)
			if podNS.IsOpen() && w != nil && hardwareNIC(d) {
				// Neither in the open pod netns nor on the host: the NIC
				// left while the pod had it (a VF or SF deleted, a driver
				// unbound). Nothing to wait for, but reported.
				p.noteGiveUp(w, d, functionOf(d), cniops.GiveUpVanished, log)
			}
			return "", nil
		}
		// Named after the wait: the lock was given up meanwhile.
		want.Name = p.freeHostName(*d, l.Index)
		if l.Name != want.Name || l.MTU != d.Host.MTU || l.MAC != d.Host.MAC || l.Up != d.Host.Up {
			if _, err := p.Links.Set(p.HostNS, l.Name, want); err != nil {
				return "", fmt.Errorf("restore netdev %s on the host as %s: %w", l.Name, want.Name, err)
			}
		}
	}
	if d.SoftType != "" {
		if _, err := p.addSoft(p.HostNS, d.RDMA, want.Name, false); err != nil {
			return want.Name, fmt.Errorf("re-create %s device %s on %s: %w", d.SoftType, d.RDMA, want.Name, err)
		}
	}
	return want.Name, nil
}

// freeHostName is the name d's netdev gets back on the host: its own, or a
// temporary one when another netdev has taken it. ours is the index of the
// netdev on the host when it is there already (-1 when not): a VF that
// came back re-probed has a new MAC, maybe under its old name.
func (p *Plugin) freeHostName(d attachment.Device, ours int) string {
	if l, err := p.Links.Get(p.HostNS, d.Host.Name); err == nil && l.Index != ours && !isOurs(l, d) {
		return tempName(d)
	}
	return d.Host.Name
}

// findOnHost looks for d's netdev in the host netns: by MAC, under its own
// name, its pod name, a temporary name or a kernel "devN" name; else, with
// res set and a record that names d's function (Kind), as the one netdev
// its function has on the host, under any name and with any MAC: a VF
// re-probed while its pod died (an FLR, mlx5 health recovery) comes back
// so. A record without Kind (written before it existed) may be an SF whose
// PCIAddress is its PF's, whose netdev is not the SF's: MAC only then.
func (p *Plugin) findOnHost(d attachment.Device, res Resolver) (rdma.Link, bool, error) {
	links, err := p.Links.List(p.HostNS)
	if err != nil {
		return rdma.Link{}, false, err
	}
	for _, l := range links {
		if !isOurs(l, d) {
			continue
		}
		if l.Name == d.Host.Name || l.Name == d.PodIfName || l.Name == tempName(d) || kernelName(l.Name) || l.Index == d.Host.Index {
			return l, true, nil
		}
	}
	if res == nil || d.SoftType != "" || d.Child != "" || !functionKnown(d) {
		return rdma.Link{}, false, nil
	}
	present, names, err := res.FunctionNetdevs(d.PCIAddress, d.AuxDevice)
	if err != nil || !present || len(names) != 1 {
		return rdma.Link{}, false, err
	}
	for _, l := range links {
		if l.Name == names[0] {
			return l, true, nil
		}
	}
	return rdma.Link{}, false, nil
}

// functionKnown reports whether d's record says which function to look
// its netdev up by: a PF or VF by its PCI address, an SF by its auxiliary
// device.
func functionKnown(d attachment.Device) bool {
	switch d.Kind {
	case "PF", "VF":
		return d.PCIAddress != ""
	case "SF":
		return d.AuxDevice != ""
	}
	return false
}

// awaitOnHost waits for d's netdev to appear in the host netns, polling,
// when d is a hardware NIC whose function is still on the node (its PCI
// function; an SF's auxiliary device): the kernel moves a physical netdev
// out of a dying netns asynchronously. A soft device's netdev is not
// returned by the kernel, and a NIC whose function is gone (hot-unplugged,
// a VF or SF destroyed) will not come back: nothing to wait for then, and
// false without an error.
//
// The wait gives up the node-wide lock (w.lock) and ends at w.deadline,
// with an error wrapping ErrNetdevNotBack: the caller keeps the record for
// the next DEL or GC. d.AwaitSince is set on the first wait, and once
// NetdevGiveUp has passed since it, the NIC is given up: logged as an
// error, and false without an error, so the attachment ends (its IPAM
// released, its record removed) and the device is no longer claimed: it
// rejoins its pool when its netdev reappears. A pod's DEL so never fails
// for longer than NetdevGiveUp because of one NIC.
func (p *Plugin) awaitOnHost(d *attachment.Device, w *waitFor, log *slog.Logger) (rdma.Link, bool, error) {
	if !hardwareNIC(d) {
		return rdma.Link{}, false, nil
	}
	aux := ""
	if d.Kind == "SF" {
		aux = d.AuxDevice
	}
	fn := functionOf(d)
	present, _, err := w.res.FunctionNetdevs(d.PCIAddress, aux)
	if err != nil {
		return rdma.Link{}, false, fmt.Errorf("netdev %s of %s: %w", d.Host.Name, d.RDMA, err)
	}
	if !present {
		log.Warn("the NIC's function is gone from the node; nothing will come back", "netdev", d.Host.Name, "rdma", d.RDMA, "function", fn)
		p.noteGiveUp(w, d, fn, cniops.GiveUpGone, log)
		return rdma.Link{}, false, nil
	}
	start := time.Now()
	if d.AwaitSince == nil {
		t := start.UTC()
		d.AwaitSince = &t
	}
	bound := cmp.Or(p.NetdevGiveUp, DefaultNetdevGiveUp)
	giveUp := d.AwaitSince.Add(bound)
	end := w.deadline
	if giveUp.Before(end) {
		end = giveUp
	}
	w.lock.release()
	var l rdma.Link
	ok := false
	for {
		l, ok, err = p.findOnHost(*d, w.res)
		if err != nil || ok || !time.Now().Before(end) {
			break
		}
		time.Sleep(min(20*time.Millisecond, time.Until(end)))
	}
	if lerr := w.lock.acquire(); lerr != nil {
		return rdma.Link{}, false, lerr
	}
	if err != nil {
		return rdma.Link{}, false, err
	}
	if ok {
		// Found without the lock; the record still claims it, so nothing
		// took it since. Read again under the lock for its current state.
		if l, ok, err = p.findOnHost(*d, w.res); err != nil || ok {
			if ok {
				log.Info("netdev came back from the pod's netns", "netdev", l.Name, "function", fn, "waited", time.Since(start))
			}
			return l, ok, err
		}
	}
	if !time.Now().Before(giveUp) {
		log.Error("netdev has not come back from the pod's netns since the first wait for it; given up, the attachment ends: "+
			"the device rejoins its pool when its netdev reappears", "netdev", d.Host.Name, "rdma", d.RDMA, "function", fn,
			"podIfName", d.PodIfName, "waitingSince", d.AwaitSince.Format(time.RFC3339), "giveUp", bound)
		p.noteGiveUp(w, d, fn, cniops.GiveUpNotBack, log)
		return rdma.Link{}, false, nil
	}
	log.Warn("netdev has not come back from the pod's netns; record kept", "netdev", d.Host.Name, "function", fn,
		"podIfName", d.PodIfName, "waited", time.Since(start), "waitingSince", d.AwaitSince.Format(time.RFC3339))
	return rdma.Link{}, false, fmt.Errorf("netdev %s of %s (function %s, pod name %s): %w within %v (waiting since %s, given up after %v); record kept for the next DEL or GC",
		d.Host.Name, d.RDMA, fn, d.PodIfName, ErrNetdevNotBack, time.Since(start).Round(time.Millisecond),
		d.AwaitSince.Format(time.RFC3339), bound)
}

// noteGiveUp counts a NIC given up for the command's operation record
// (OpCodeGaveUp) and leaves it in the node's give-up spool, from which the
// daemon posts it as an Event on the pod and counts it. Best effort: a
// failure to write is logged, the attachment ends either way.
func (p *Plugin) noteGiveUp(w *waitFor, d *attachment.Device, fn, reason string, log *slog.Logger) {
	p.gaveUp.Add(1)
	if p.Node.StateDir == "" || w.rec == nil {
		return
	}
	g := cniops.GiveUp{Time: time.Now().UTC(), Command: w.cmd, ContainerID: w.rec.ContainerID, IfName: w.rec.IfName,
		RDMA: d.RDMA, Netdev: d.Host.Name, PodIfName: d.PodIfName, Function: fn, Reason: reason}
	if pod := w.rec.Pod; pod != nil {
		g.PodNamespace, g.PodName, g.PodUID = pod.Namespace, pod.Name, pod.UID
	}
	if d.AwaitSince != nil {
		g.Waited = max(time.Since(*d.AwaitSince), 0)
	}
	if err := cniops.AppendGiveUp(cniops.Dir(p.Node.StateDir), g); err != nil {
		log.Warn("leave the give-up for the daemon to report", "rdma", d.RDMA, "err", err)
	}
}

// hardwareNIC says whether d is a NIC of a PCI function or an auxiliary
// device (not a soft device, whose netdev is a virtual one).
func hardwareNIC(d *attachment.Device) bool {
	return d.SoftType == "" && (d.PCIAddress != "" || d.AuxDevice != "")
}

// functionOf names d's function: an SF's auxiliary device, else its PCI
// function.
func functionOf(d *attachment.Device) string {
	if d.Kind == "SF" && d.AuxDevice != "" {
		return d.AuxDevice
	}
	return d.PCIAddress
}
