package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// execIPAM runs the IPAM plugin binary found in CNI_PATH with explicit
// arguments (not this process's CNI_* environment), so one process can run
// it for several interfaces.
type execIPAM struct{}

func (execIPAM) args(cmd string, a IPAMArgs) *invoke.Args {
	return &invoke.Args{Command: cmd, ContainerID: a.ContainerID, NetNS: a.Netns, IfName: a.IfName, PluginArgsStr: a.Args, Path: a.Path}
}

func find(plugin string, a IPAMArgs) (string, error) {
	p, err := invoke.FindInPath(plugin, filepath.SplitList(a.Path))
	if err != nil {
		return "", fmt.Errorf("find ipam plugin %q in CNI_PATH %q: %w", plugin, a.Path, err)
	}
	return p, nil
}

func (e execIPAM) Add(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) (types.Result, error) {
	var res types.Result
	err := e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		var err error
		res, err = invoke.ExecPluginWithResult(ctx, path, stdin, e.args("ADD", a), nil)
		return err
	})
	return res, err
}

func (e execIPAM) Check(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error {
	return e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		return invoke.ExecPluginWithoutResult(ctx, path, stdin, e.args("CHECK", a), nil)
	})
}

func (e execIPAM) Del(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error {
	return e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		return invoke.ExecPluginWithoutResult(ctx, path, stdin, e.args("DEL", a), nil)
	})
}

// run calls exec with the plugin's path. An IPAM plugin older than the
// configuration's cniVersion (Debian's host-local stops at 1.0.0) refuses it;
// then exec runs again with the highest version the plugin supports that is
// below the configured one.
func (e execIPAM) run(ctx context.Context, plugin string, stdin []byte, a IPAMArgs, exec func(string, []byte) error) error {
	path, err := find(plugin, a)
	if err != nil {
		return err
	}
	err = exec(path, stdin)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrIncompatibleCNIVersion {
		return err
	}
	info, verr := invoke.GetVersionInfo(ctx, path, nil)
	if verr != nil {
		return err
	}
	var conf map[string]any
	if json.Unmarshal(stdin, &conf) != nil {
		return err
	}
	want, _ := conf["cniVersion"].(string)
	best := ""
	for _, v := range info.SupportedVersions() {
		if lower, _ := version.GreaterThan(want, v); lower && (best == "" || greater(v, best)) {
			best = v
		}
	}
	if best == "" {
		return err
	}
	conf["cniVersion"] = best
	down, merr := json.Marshal(conf)
	if merr != nil {
		return err
	}
	return exec(path, down)
}

func greater(a, b string) bool {
	g, _ := version.GreaterThan(a, b)
	return g
}

// netlinkAddrs configures addresses through a netlink handle bound to the
// pod's namespace.
type netlinkAddrs struct{}

func (netlinkAddrs) Configure(ns netns.NsHandle, ifName string, ips []*types100.IPConfig, routes []*types.Route) error {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("open netlink socket in pod netns: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return fmt.Errorf("find %q in pod netns: %w", ifName, err)
	}
	for _, ip := range ips {
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip.Address.IP, Mask: ip.Address.Mask}}
		if err := h.AddrAdd(l, addr); err != nil {
			return fmt.Errorf("add address %s to %q: %w", ip.Address.String(), ifName, err)
		}
	}
	for _, r := range routes {
		rt := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: &net.IPNet{IP: r.Dst.IP, Mask: r.Dst.Mask}, Gw: r.GW}
		if r.MTU > 0 {
			rt.MTU = r.MTU
		}
		if err := h.RouteAdd(rt); err != nil {
			return fmt.Errorf("add route %s via %s on %q: %w", r.Dst.String(), r.GW, ifName, err)
		}
	}
	return nil
}

func (netlinkAddrs) List(ns netns.NsHandle, ifName string) ([]net.IPNet, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open netlink socket in pod netns: %w", err)
	}
	defer h.Close()
	l, err := h.LinkByName(ifName)
	if err != nil {
		return nil, fmt.Errorf("find %q in pod netns: %w", ifName, err)
	}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list addresses of %q: %w", ifName, err)
	}
	var out []net.IPNet
	for _, a := range addrs {
		out = append(out, *a.IPNet)
	}
	return out, nil
}
