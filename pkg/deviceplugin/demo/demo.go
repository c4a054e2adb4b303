// Package demo runs the device plugin daemon on a sysfs tree (a nodesim
// sample node) against the in-process kubelet stand-in and narrates what the
// kubelet sees: registration, the device list with NUMA nodes, a preferred
// allocation, an Allocate response, a port going down and back, and a kubelet
// restart. It needs no root, no cluster and no RDMA hardware.
//
// It writes only to temporary directories it creates and to the port state
// files of the tree it is given (which it restores).
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
)

// Options says which tree to run on and where to write.
type Options struct {
	SysRoot  string
	ProcRoot string
	// ConfigFile is a pools file; "" uses the built-in default (pool "hca").
	ConfigFile string
	Out        io.Writer
	// Log receives the daemon's and the stand-in's logs; nil discards them.
	Log *slog.Logger
	// Hold keeps the daemon and the stand-in running after the script until
	// ctx ends, with metrics on MetricsAddr.
	Hold        bool
	MetricsAddr string
}

const waitLimit = 10 * time.Second

// Run plays the script.
func Run(ctx context.Context, o Options) (retErr error) {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	tmp, err := os.MkdirTemp("", "kube-rdma-demo")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	kdir, devRoot, err := makeDirs(tmp)
	if err != nil {
		return err
	}
	k, err := kubeletstub.Start(kdir, o.Log)
	if err != nil {
		return err
	}
	defer k.Stop()
	d, err := newDaemon(o, tmp, kdir, devRoot)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	begin := time.Now()
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		return err
	}
	// The daemon runs until the script ends; its error, if any, is the
	// demo's when the script did not fail first.
	defer func() {
		cancel()
		if err := <-done; err != nil && retErr == nil {
			retErr = err
		}
	}()
	resource, err := showRegistration(ctx, out, d, k, begin)
	if err != nil {
		return err
	}
	pref, err := allocate(ctx, out, k, resource)
	if err != nil {
		return err
	}
	if err := flipPort(ctx, out, d, k, resource, pref[0]); err != nil {
		return err
	}
	if err := restartKubelet(ctx, out, k, resource); err != nil {
		return err
	}
	return hold(ctx, out, o, d)
}

// makeDirs creates the kubelet directory's path and a /dev tree with
// infiniband/rdma_cm under tmp.
func makeDirs(tmp string) (kdir, devRoot string, err error) {
	kdir, devRoot = filepath.Join(tmp, "dp"), filepath.Join(tmp, "dev")
	if err := os.MkdirAll(filepath.Join(devRoot, "infiniband"), 0o755); err != nil {
		return "", "", fmt.Errorf("demo: %w", err)
	}
	if err := os.WriteFile(filepath.Join(devRoot, "infiniband/rdma_cm"), nil, 0o644); err != nil {
		return "", "", fmt.Errorf("demo: %w", err)
	}
	return kdir, devRoot, nil
}

// newDaemon configures the node agent and its device plugin front end for
// the demo's tree and directories.
func newDaemon(o Options, tmp, kdir, devRoot string) (*agent.Agent, error) {
	addr := o.MetricsAddr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	dp, err := deviceplugin.New(deviceplugin.Config{KubeletDir: kdir, DevRoot: devRoot, CDIDir: filepath.Join(tmp, "cdi"), Logger: o.Log})
	if err != nil {
		return nil, err
	}
	return agent.New(agent.Config{
		ConfigFile: o.ConfigFile, SysRoot: o.SysRoot, ProcRoot: o.ProcRoot,
		MetricsAddr: addr, NodeName: "demo-node", Logger: o.Log,
		FrontEnds: map[config.Frontend]agent.FrontEnd{config.DevicePlugin: dp},
		Events:    []agent.EventSource{},
	})
}

// showRegistration waits for the kubelet to list the first pool's devices,
// prints the registration and the device table, and returns that resource.
func showRegistration(ctx context.Context, out io.Writer, d *agent.Agent, k *kubeletstub.Kubelet, begin time.Time) (string, error) {
	st := d.State()
	if len(st.Pools) == 0 {
		return "", fmt.Errorf("demo: no pools")
	}
	resource := st.Pools[0].Resource
	if err := wait(ctx, k, func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices(resource); return ok }); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "== Device plugin registered %s with the kubelet stand-in in %s (RDMA netns mode: %s)\n\n",
		strings.Join(k.Resources(), ", "), time.Since(begin).Round(time.Millisecond), st.RDMANetnsMode)
	printDevices(out, d.State(), k)
	return resource, nil
}

// allocate asks for a preferred allocation of up to two devices, allocates
// it and prints both; it returns the preferred device IDs.
func allocate(ctx context.Context, out io.Writer, k *kubeletstub.Kubelet, resource string) ([]string, error) {
	devs, _ := k.Devices(resource)
	var avail []string
	for _, x := range devs {
		avail = append(avail, x.ID)
	}
	size := min(2, len(avail))
	pref, err := k.GetPreferredAllocation(ctx, resource, avail, nil, size)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\n== GetPreferredAllocation(%d of %d): %s\n", size, len(avail), strings.Join(pref, ", "))
	resp, err := k.Allocate(ctx, resource, pref)
	if err != nil {
		return nil, err
	}
	printAllocate(out, resp.ContainerResponses[0])
	return pref, nil
}

// restartKubelet restarts the stand-in and waits for the plugin to register
// and list its devices again.
func restartKubelet(ctx context.Context, out io.Writer, k *kubeletstub.Kubelet, resource string) error {
	fmt.Fprintf(out, "\n== Kubelet restart (kubelet.sock and plugin sockets removed, kubelet.sock recreated)\n")
	n := len(k.Registrations())
	t0 := time.Now()
	if err := k.Restart(); err != nil {
		return err
	}
	if err := wait(ctx, k, func(k *kubeletstub.Kubelet) bool {
		_, ok := k.Devices(resource)
		return ok && len(k.Registrations()) > n
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "   re-registered and listed again after %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

// hold ends the script, or with o.Hold prints the metrics addresses and
// waits for ctx to end.
func hold(ctx context.Context, out io.Writer, o Options, d *agent.Agent) error {
	if !o.Hold {
		fmt.Fprintf(out, "\n== Done (--hold keeps the daemon running with /metrics and /state served)\n")
		return nil
	}
	fmt.Fprintf(out, "\n== Metrics and node state: http://%s/metrics  http://%s/state\n", d.MetricsAddr(), d.MetricsAddr())
	fmt.Fprintf(out, "   holding until interrupted\n")
	<-ctx.Done()
	return nil
}

func wait(ctx context.Context, k *kubeletstub.Kubelet, cond func(*kubeletstub.Kubelet) bool) error {
	ctx, cancel := context.WithTimeout(ctx, waitLimit)
	defer cancel()
	return k.WaitFor(ctx, cond)
}

func printDevices(out io.Writer, st agent.State, k *kubeletstub.Kubelet) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tDEVICE ID\tHEALTH\tNUMA\tRDMA DEVICES")
	for _, p := range st.Pools {
		devs, _ := k.Devices(p.Resource)
		rdma := map[string]string{}
		for _, ds := range p.Devices {
			rdma[ds.ID] = strings.Join(ds.RDMADevices, ",")
		}
		for _, x := range devs {
			var numa []string
			for _, n := range x.GetTopology().GetNodes() {
				numa = append(numa, fmt.Sprint(n.ID))
			}
			r := rdma[x.ID]
			if p.Mode == "shared" && len(p.Devices) > 0 {
				r = strings.Join(p.Devices[0].RDMADevices, ",")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.Resource, x.ID, x.Health, strings.Join(numa, ","), r)
		}
	}
	_ = tw.Flush() // the demo's output, as fmt.Fprintf to it above
}

func printAllocate(out io.Writer, c *pluginapi.ContainerAllocateResponse) {
	fmt.Fprintf(out, "\n== Allocate response\n   devices:")
	for _, s := range c.Devices {
		fmt.Fprintf(out, " %s(%s)", s.ContainerPath, s.Permissions)
	}
	fmt.Fprintln(out)
	keys := make([]string, 0, len(c.Envs))
	for k := range c.Envs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(out, "   env %s=%s\n", k, c.Envs[k])
	}
	for _, x := range c.CdiDevices {
		fmt.Fprintf(out, "   cdi %s\n", x.Name)
	}
}

// flipPort writes DOWN into the first port of the device behind id, waits
// for the kubelet to see it Unhealthy, restores the file and waits again.
func flipPort(ctx context.Context, out io.Writer, d *agent.Agent, k *kubeletstub.Kubelet, resource, id string) error {
	var name string
	for _, p := range d.State().Pools {
		for _, ds := range p.Devices {
			if ds.ID == id && len(ds.RDMADevices) > 0 {
				name = ds.RDMADevices[0]
			}
		}
	}
	if name == "" {
		return fmt.Errorf("demo: no rdma device behind %s", id)
	}
	path := filepath.Join(d.Config().SysRoot, "class/infiniband", name, "ports/1/state")
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	is := func(h string) func(*kubeletstub.Kubelet) bool {
		return func(k *kubeletstub.Kubelet) bool {
			devs, _ := k.Devices(resource)
			for _, x := range devs {
				if x.ID == id {
					return x.Health == h
				}
			}
			return false
		}
	}
	fmt.Fprintf(out, "\n== Port 1 of %s (%s) goes DOWN\n", name, id)
	t0 := time.Now()
	if err := os.WriteFile(path, []byte("1: DOWN\n"), 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := wait(ctx, k, is(pluginapi.Unhealthy)); err != nil {
		return err
	}
	fmt.Fprintf(out, "   kubelet sees %s Unhealthy after %s\n", id, time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	if err := os.WriteFile(path, old, 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := wait(ctx, k, is(pluginapi.Healthy)); err != nil {
		return err
	}
	fmt.Fprintf(out, "   port back ACTIVE: Healthy again after %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}
