package cni

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// cniPath is where Debian's containernetworking-plugins puts host-local.
const cniPath = "/usr/lib/cni"

func requireHostLocal(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cniPath, "host-local")); err != nil {
		t.Skip("needs the host-local IPAM plugin in /usr/lib/cni (apt-get install containernetworking-plugins)")
	}
}

// writeSysfs writes a sysfs tree (nodesim, the kernel's layout) with one PCI
// function per hardware device (mlx5_N with netdev nicN) and one soft-RoCE
// device per soft entry (rxeN on its netdev).
func writeSysfs(t testing.TB, hw int, soft map[string]string) string {
	t.Helper()
	port := nodesim.Port{State: nodesim.StateActive, PhysState: nodesim.PhysLinkUp, LinkLayer: "Ethernet", Rate: "100 Gb/sec (4X EDR)"}
	var topo nodesim.Topology
	for i := range hw {
		topo.PCI = append(topo.PCI, nodesim.Function{
			Path: "pci0000:00/0000:00:01.0/" + pciAddr(i), Vendor: "15b3", Device: "1017", Class: "020000",
			Driver: "mlx5_core", NUMANode: -1, Netdevs: []nodesim.Netdev{{Name: fmt.Sprintf("nic%d", i)}},
		})
		topo.RDMA = append(topo.RDMA, nodesim.RDMA{Name: fmt.Sprintf("mlx5_%d", i), Parent: pciAddr(i), Ports: []nodesim.Port{port}})
	}
	for name, parent := range soft {
		topo.VirtualNetdevs = append(topo.VirtualNetdevs, parent)
		topo.RDMA = append(topo.RDMA, nodesim.RDMA{Name: name, NetdevParent: parent, Ports: []nodesim.Port{port}, NoMAD: true})
	}
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatalf("build sysfs fixture: %v", err)
	}
	return tree.SysRoot
}

func pciAddr(i int) string { return fmt.Sprintf("0000:%02x:00.0", i+1) }

// fakeRDMA stands in for RDMA netlink only because this test kernel has no
// RDMA subsystem. It models what the kernel does that the plugin relies on:
// device names are node-wide; a soft-RoCE device is destroyed when its
// netdev leaves its netns (checked against the real netdevs); in exclusive
// mode a device lives in one netns and moves with Move, and a new soft
// device is registered in the host's (the initial) netns whatever the
// socket's, as Linux 7.3 does; softNoMove is a kernel whose rxe cannot
// move (no disassociate_ucontext: EOPNOTSUPP).
type fakeRDMA struct {
	mu         sync.Mutex
	mode       rdma.NetnsMode
	hostID     string
	softNoMove bool
	devs       map[string]*fakeDev
	// fail, when set, can make a method ("Move", "AddRxe", "NetnsMode")
	// fail for the netns it acts in.
	fail func(method string, ns netns.NsHandle) error
	t    testing.TB
}

type fakeDev struct {
	nsID    string
	ns      netns.NsHandle // a dup of the netdev's netns, for soft devices' netdev checks
	ifindex int            // soft devices only
	soft    bool
}

func newFakeRDMA(t testing.TB, mode rdma.NetnsMode, host netns.NsHandle, hw []string) *fakeRDMA {
	f := &fakeRDMA{mode: mode, hostID: host.UniqueId(), devs: map[string]*fakeDev{}, t: t}
	for _, n := range hw {
		f.devs[n] = &fakeDev{nsID: host.UniqueId()}
	}
	return f
}

func (f *fakeRDMA) failing(method string, ns netns.NsHandle) error {
	f.prune() // the kernel acts at once; the fake catches up on every call
	if f.fail == nil {
		return nil
	}
	return f.fail(method, ns)
}

// prune drops soft devices whose netdev left their netns, as the kernel
// does on NETDEV_UNREGISTER.
func (f *fakeRDMA) prune() {
	for name, d := range f.devs {
		if !d.soft {
			continue
		}
		h, err := netlink.NewHandleAt(d.ns, unix.NETLINK_ROUTE)
		if err != nil {
			delete(f.devs, name) // the netns is gone
			_ = unix.Close(int(d.ns))
			continue
		}
		_, err = h.LinkByIndex(d.ifindex)
		h.Close()
		if err != nil {
			delete(f.devs, name)
			_ = unix.Close(int(d.ns))
		}
	}
}

func (f *fakeRDMA) NetnsMode(netns.NsHandle) (rdma.NetnsMode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failing("NetnsMode", netns.None()); err != nil {
		return "", err
	}
	return f.mode, nil
}

func (f *fakeRDMA) List(ns netns.NsHandle) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prune()
	var out []string
	for name, d := range f.devs {
		if f.mode == rdma.NetnsShared || d.nsID == ns.UniqueId() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (f *fakeRDMA) Move(from netns.NsHandle, name string, to netns.NsHandle) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failing("Move", to); err != nil {
		return err
	}
	d, ok := f.devs[name]
	if !ok || d.nsID != from.UniqueId() {
		return fmt.Errorf("rdma device %s not in netns: %w", name, unix.ENODEV)
	}
	if f.mode != rdma.NetnsExclusive || d.soft && f.softNoMove {
		return unix.EOPNOTSUPP
	}
	d.nsID = to.UniqueId()
	return nil
}

func (f *fakeRDMA) AddRxe(ns netns.NsHandle, name, netdev string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failing("AddRxe", ns); err != nil {
		return err
	}
	f.prune()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(netdev)
	if err != nil {
		return unix.ENODEV
	}
	if _, ok := f.devs[name]; ok {
		return unix.ENFILE // ib_core's answer to a taken device name
	}
	for _, d := range f.devs {
		if d.soft && d.ns.UniqueId() == ns.UniqueId() && d.ifindex == l.Attrs().Index {
			return unix.EEXIST // one rxe per netdev
		}
	}
	dup, err := unix.Dup(int(ns))
	if err != nil {
		return err
	}
	in := ns.UniqueId()
	if f.mode == rdma.NetnsExclusive {
		in = f.hostID
	}
	f.devs[name] = &fakeDev{nsID: in, ns: netns.NsHandle(dup), ifindex: l.Attrs().Index, soft: true}
	return nil
}

func (f *fakeRDMA) DelSoft(ns netns.NsHandle, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.failing("DelSoft", ns); err != nil {
		return err
	}
	d, ok := f.devs[name]
	if !ok || f.mode == rdma.NetnsExclusive && d.nsID != ns.UniqueId() {
		return fmt.Errorf("rdma device %s: %w", name, rdma.ErrDeviceNotFound)
	}
	if !d.soft {
		return unix.EOPNOTSUPP
	}
	_ = unix.Close(int(d.ns))
	delete(f.devs, name)
	return nil
}

// where returns each device and the netns it is in ("host", "pod", or the
// soft device's "netns/netdev"), for comparisons.
func (f *fakeRDMA) where(names map[string]string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prune()
	out := map[string]string{}
	for name, d := range f.devs {
		loc := names[d.nsID]
		if loc == "" {
			loc = d.nsID
		}
		if d.soft {
			h, _ := netlink.NewHandleAt(d.ns, unix.NETLINK_ROUTE)
			l, err := h.LinkByIndex(d.ifindex)
			h.Close()
			if err == nil {
				loc += "/" + l.Attrs().Name
			}
		}
		out[name] = loc
	}
	return out
}

// env is a throw-away host netns with veth links standing in for NICs.
type env struct {
	t        testing.TB
	host     *netnstest.NS
	sys      string
	stateDir string
	rdma     *fakeRDMA
	p        *Plugin
	mode     rdma.NetnsMode
	socket   string
	// The node file's other paths (netconf.Node); "" is the default.
	logFile, allocDir, procRoot, claims string
}

// newEnv makes hw "NICs" (mlx5_N on nicN) and, when soft is set, rxe0 on
// the netdev rxnic, in a new host netns.
func newEnv(t testing.TB, hw int, soft bool, mode rdma.NetnsMode) *env {
	t.Helper()
	host := netnstest.New(t)
	var hwNames []string
	for i := range hw {
		netnstest.Veth(t, host, fmt.Sprintf("nic%d", i), fmt.Sprintf("peer%d", i))
		hwNames = append(hwNames, fmt.Sprintf("mlx5_%d", i))
	}
	softs := map[string]string{}
	f := newFakeRDMA(t, mode, host.Handle, hwNames)
	if soft {
		netnstest.Veth(t, host, "rxnic", "rxpeer")
		h := netnstest.Handle(t, host)
		l, _ := h.LinkByName("rxnic")
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		softs["rxe0"] = "rxnic"
		if err := f.AddRxe(host.Handle, "rxe0", "rxnic"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, d := range f.devs {
			if d.soft {
				_ = unix.Close(int(d.ns))
			}
		}
	})
	sys := writeSysfs(t, hw, softs)
	e := &env{t: t, host: host, sys: sys, stateDir: filepath.Join(t.TempDir(), "state"), rdma: f, mode: mode, allocDir: t.TempDir()}
	// The daemon's pools file: every device in pool "rdma".
	pool := nodepools.Pool{Name: "rdma", Mode: "exclusive", Frontend: "devicePlugin"}
	for i, n := range hwNames {
		pool.Devices = append(pool.Devices, nodepools.Device{RDMA: n, PCIAddress: pciAddr(i)})
	}
	for n := range softs {
		pool.Devices = append(pool.Devices, nodepools.Device{RDMA: n})
	}
	e.writePools(nodepools.File{Pools: []nodepools.Pool{pool}})
	e.p = &Plugin{
		HostNS:       host.Handle,
		Links:        rdma.Netdevs{},
		Addrs:        routeAddrs{},
		RDMA:         f,
		IPAM:         execIPAM{},
		Resolver:     func(root string) Resolver { return discovery.Scanner{SysRoot: root} },
		PodResources: dialPodResources,
		Log:          slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		SoftRDMAWait: 300 * time.Millisecond,
		BootID:       "test-boot",
		// NetdevReturnWait: 2 s, a bound no test's NIC needs all of.
		NetdevReturnWait: 2 * time.Second,
	}
	return e
}

// writePools replaces the node's pools file in the env's alloc dir.
func (e *env) writePools(f nodepools.File) {
	e.t.Helper()
	b, err := f.Marshal()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := nodepools.Write(nodepools.Path(e.allocDir), b); err != nil {
		e.t.Fatal(err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// node is the node file the test's plugin runs with: the env's paths, and
// requirePodResources off (the tests of a deviceID without a kubelet turn
// it on in the netconf).
func (e *env) node() netconf.Node {
	off := false
	return netconf.Node{StateDir: e.stateDir, SysfsRoot: e.sys, KubeletSocket: e.kubeletSocket(), LogFile: e.logFile,
		AllocDir: e.allocDir, ProcRoot: e.procRoot, DRAClaimsDir: e.claims, RequirePodResources: &off}
}

// conf returns a netconf, without host paths (those are the node's: conf
// sets the plugin's Node from the env); extra is spliced in as further
// JSON fields.
//
// The Node is set only when it changed: tests run ADDs and DELs from several
// goroutines, which read the plugin's Node, while the env stays the same.
func (e *env) conf(ver, extra string) []byte {
	if n := e.node(); !sameNode(n, e.p.Node) {
		e.p.Node = n
	}
	s := fmt.Sprintf(`{"cniVersion":%q,"name":"rdma","type":"kube-rdma","rdmaNetnsMode":%q`, ver, e.mode)
	if extra != "" {
		s += "," + extra
	}
	return []byte(s + "}")
}

func (e *env) kubeletSocket() string {
	if e.socket != "" {
		return e.socket
	}
	return filepath.Join(e.stateDir, "no-kubelet.sock")
}

func hostLocal(subnet string) string {
	return fmt.Sprintf(`"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":%q}]]}`, "DATADIR", subnet)
}

// ipam returns a host-local IPAM section with its data dir in the test's
// temporary directory.
func (e *env) ipam(subnet string) string {
	return strings.Replace(hostLocal(subnet), "DATADIR", filepath.Join(e.stateDir, "..", "ipam"), 1)
}

func args(id string, pod *netnstest.NS, ifName string, stdin []byte) *skel.CmdArgs {
	a := &skel.CmdArgs{ContainerID: id, IfName: ifName, Path: cniPath, StdinData: stdin}
	if pod != nil {
		a.Netns = pod.Path
	}
	return a
}

// snapshot is what must be unchanged after a failed ADD or a DEL.
type snapshot struct {
	Host    []netnstest.Link
	RDMA    map[string]string
	Records []string
}

func (e *env) snapshot(pods ...*netnstest.NS) snapshot {
	names := map[string]string{e.host.Handle.UniqueId(): "host"}
	for i, p := range pods {
		names[p.Handle.UniqueId()] = fmt.Sprintf("pod%d", i)
	}
	var recs []string
	ents, _ := os.ReadDir(e.stateDir)
	for _, ent := range ents {
		if strings.HasSuffix(ent.Name(), ".json") {
			recs = append(recs, ent.Name())
		}
	}
	return snapshot{Host: netnstest.Links(e.t, e.host), RDMA: e.rdma.where(names), Records: recs}
}

func mustAdd(t *testing.T, e *env, a *skel.CmdArgs) *types100.Result {
	t.Helper()
	res, err := e.p.Add(context.Background(), a)
	if err != nil {
		t.Fatalf("ADD: %v", err)
	}
	return res
}

func cniCode(err error) uint {
	if err == nil {
		return 0
	}
	return Error(err).Code
}

var _ = errors.New
var _ = types.ErrInternal

func sameNode(a, b netconf.Node) bool {
	pa, pb := a.RequirePodResources, b.RequirePodResources
	a.RequirePodResources, b.RequirePodResources = nil, nil
	return a == b && (pa == nil) == (pb == nil) && (pa == nil || *pa == *pb)
}
