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
	unlock, err := store.Lock()
	if err != nil {
		return err
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	mark("lock")
	rec, err := store.Load(key)
	if errors.Is(err, attachment.ErrStale) {
		unlock()
		locked = false
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
		if locked {
			unlock()
			locked = false
		}
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
	rerr := p.returnDevices(podNS, &rec, p.Resolver(conf.SysfsRoot), log)
	mark("move")
	if ipamType != "" {
		// The devices returned are no longer claimed from here on, while
		// IPAM (which may hang) runs without the node-wide lock.
		if err := store.Save(rec); err != nil {
			rerr = errors.Join(rerr, err)
		}
	}
	unlock()
	locked = false
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
// returns them all. When the pod netns is gone, NICs still on their way
// back are waited for until one deadline, NetdevReturnWait from now (res
// tells a NIC on its way from one that is gone).
func (p *Plugin) returnDevices(podNS netns.NsHandle, rec *attachment.Attachment, res Resolver, log *slog.Logger) error {
	var deadline time.Time
	if !podNS.IsOpen() {
		deadline = time.Now().Add(p.NetdevReturnWait)
	}
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
		name, err := p.returnNetdev(podNS, *d, res, deadline, log)
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
// returned, or returned by the kernel when the netns died). It returns the
// host name used, "" when the netdev no longer exists.
//
// With res set (the pod netns is gone), a hardware NIC not found on the
// host whose PCI function is still on the node is on its way back: the
// kernel moves it out of the dying netns asynchronously. It is waited for
// until deadline, then restored; past the deadline the error wraps
// ErrNetdevNotBack and the caller keeps the record.
func (p *Plugin) returnNetdev(podNS netns.NsHandle, d attachment.Device, res Resolver, deadline time.Time,
	log *slog.Logger) (string, error) {
	mac, _ := net.ParseMAC(d.Host.MAC)
	want := rdma.LinkConfig{Name: d.Host.Name, MTU: d.Host.MTU, MAC: mac, Up: d.Host.Up}
	if l, err := p.Links.Get(p.HostNS, want.Name); err == nil && !isOurs(l, d) {
		want.Name = tempName(d)
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
		if _, err := p.Links.Move(podNS, podLink, p.HostNS, want); err != nil {
			return "", fmt.Errorf("return netdev %s to the host as %s: %w", d.PodIfName, want.Name, err)
		}
	} else {
		l, ok, err := p.findOnHost(d)
		if err != nil {
			return "", err
		}
		if !ok && res != nil && !podNS.IsOpen() {
			if l, ok, err = p.awaitOnHost(d, res, deadline, log); err != nil {
				return "", err
			}
		}
		if !ok {
			log.Warn("netdev no longer exists; nothing to return", "netdev", d.Host.Name, "podIfName", d.PodIfName)
			return "", nil
		}
		if l.Name != d.Host.Name || l.MTU != d.Host.MTU || l.MAC != d.Host.MAC || l.Up != d.Host.Up {
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

// findOnHost looks for d's netdev in the host netns: by MAC, under its own
// name, its pod name, a temporary name or a kernel "devN" name.
func (p *Plugin) findOnHost(d attachment.Device) (rdma.Link, bool, error) {
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
	return rdma.Link{}, false, nil
}

// awaitOnHost waits until deadline for d's netdev to appear in the host
// netns, polling, when d is a hardware NIC whose PCI function is still on
// the node (a soft device's netdev is not returned by the kernel, and a NIC
// whose function is gone will not come back). Not found by then is an
// error wrapping ErrNetdevNotBack; false without an error when there is
// nothing to wait for.
func (p *Plugin) awaitOnHost(d attachment.Device, res Resolver, deadline time.Time, log *slog.Logger) (rdma.Link, bool, error) {
	if d.SoftType != "" || d.PCIAddress == "" {
		return rdma.Link{}, false, nil
	}
	present, err := res.PCIFunctionExists(d.PCIAddress)
	if err != nil {
		return rdma.Link{}, false, fmt.Errorf("netdev %s of %s: %w", d.Host.Name, d.RDMA, err)
	}
	if !present {
		return rdma.Link{}, false, nil
	}
	start := time.Now()
	for {
		l, ok, err := p.findOnHost(d)
		if err != nil || ok {
			if ok {
				log.Info("netdev came back from the pod's netns", "netdev", l.Name, "pci", d.PCIAddress, "waited", time.Since(start))
			}
			return l, ok, err
		}
		if !time.Now().Before(deadline) {
			log.Warn("netdev has not come back from the pod's netns; record kept", "netdev", d.Host.Name, "pci", d.PCIAddress,
				"podIfName", d.PodIfName, "waited", time.Since(start))
			return rdma.Link{}, false, fmt.Errorf("netdev %s of %s (PCI %s, pod name %s): %w within %v; record kept for the next DEL or GC",
				d.Host.Name, d.RDMA, d.PCIAddress, d.PodIfName, ErrNetdevNotBack, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(min(20*time.Millisecond, time.Until(deadline)))
	}
}
