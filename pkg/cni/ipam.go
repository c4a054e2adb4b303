package cni

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// execIPAM runs the IPAM plugin found in CNI_PATH with explicit arguments
// (not this process's CNI_* environment), so one process can run it for
// several interfaces. It executes the plugin itself rather than through
// libcni's invoke package, which would link net/http and OpenTelemetry into
// a binary that is exec'd for every ADD and DEL.
type execIPAM struct{}

func (e execIPAM) Add(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) (types.Result, error) {
	var res types.Result
	err := e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		out, err := execPlugin(ctx, path, "ADD", stdin, a)
		if err != nil {
			return err
		}
		var v struct {
			CNIVersion string `json:"cniVersion"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			return fmt.Errorf("decode result of %s: %w", path, err)
		}
		if v.CNIVersion == "" {
			_ = json.Unmarshal(stdin, &v) // the plugin parsed stdin already; "" stays "" otherwise
		}
		res, err = create.Create(v.CNIVersion, out)
		return err
	})
	return res, err
}

func (e execIPAM) Check(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error {
	return e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		_, err := execPlugin(ctx, path, "CHECK", stdin, a)
		return err
	})
}

func (e execIPAM) Del(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) error {
	return e.run(ctx, plugin, stdin, a, func(path string, stdin []byte) error {
		_, err := execPlugin(ctx, path, "DEL", stdin, a)
		return err
	})
}

// findPlugin looks plugin up in the CNI_PATH directories.
func findPlugin(plugin, cniPath string) (string, error) {
	for _, dir := range filepath.SplitList(cniPath) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, plugin)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("find ipam plugin %q in CNI_PATH %q: not found", plugin, cniPath)
}

// execPlugin runs one plugin command and returns its stdout; a CNI error on
// stdout comes back as *types.Error.
func execPlugin(ctx context.Context, path, command string, stdin []byte, a IPAMArgs) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path)
	env := []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + a.ContainerID, "CNI_NETNS=" + a.Netns,
		"CNI_IFNAME=" + a.IfName, "CNI_ARGS=" + a.Args, "CNI_PATH=" + a.Path}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		te := &types.Error{}
		if json.Unmarshal(stdout.Bytes(), te) == nil && (te.Code != 0 || te.Msg != "") {
			return nil, te
		}
		return nil, fmt.Errorf("run %s %s: %w: %s", path, command, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// run calls do with the plugin's path. An IPAM plugin older than the
// configuration's cniVersion (Debian's host-local stops at 1.0.0) refuses it;
// then do runs again with the highest version the plugin supports that is
// below the configured one.
func (e execIPAM) run(ctx context.Context, plugin string, stdin []byte, a IPAMArgs, do func(string, []byte) error) error {
	path, err := findPlugin(plugin, a.Path)
	if err != nil {
		return err
	}
	err = do(path, stdin)
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrIncompatibleCNIVersion {
		return err
	}
	var conf map[string]any
	if json.Unmarshal(stdin, &conf) != nil {
		return err
	}
	want, _ := conf["cniVersion"].(string)
	out, verr := execPlugin(ctx, path, "VERSION", []byte(`{"cniVersion":"`+want+`"}`), a)
	if verr != nil {
		return err
	}
	var info struct {
		Supported []string `json:"supportedVersions"`
	}
	if json.Unmarshal(out, &info) != nil {
		return err
	}
	best := ""
	for _, v := range info.Supported {
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
	return do(path, down)
}

func greater(a, b string) bool {
	g, _ := version.GreaterThan(a, b)
	return g
}

// routeAddrs converts IPAM's addresses and routes for rdma.Addresses, which
// does the netlink work in the pod's namespace.
type routeAddrs struct{ rdma.Addresses }

func (a routeAddrs) Configure(ns netns.NsHandle, ifName string, ips []*types100.IPConfig, routes []*types.Route) error {
	addrs := make([]net.IPNet, 0, len(ips))
	for _, ip := range ips {
		addrs = append(addrs, ip.Address)
	}
	rs := make([]rdma.Route, 0, len(routes))
	for _, r := range routes {
		rs = append(rs, rdma.Route{Dst: r.Dst, GW: r.GW, MTU: r.MTU})
	}
	return a.Addresses.Configure(ns, ifName, addrs, rs)
}

// ExecIPAM returns the IPAM that runs the plugins found in CNI_PATH, as
// the plugin does (for a Plugin built outside New, such as the agent's
// reclaimer's).
func ExecIPAM() IPAM { return execIPAM{} }
