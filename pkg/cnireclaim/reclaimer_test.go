package cnireclaim

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netlink"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// cniPath is where Debian's containernetworking-plugins puts host-local.
const cniPath = "/usr/lib/cni"

const (
	hostMAC = "02:00:00:00:00:01" // nic0's own
	podMAC  = "02:00:00:00:aa:01" // what ADD gave it in the pod
	peerMAC = "02:00:00:00:00:02"
	pciAddr = "0000:01:00.0"
)

// world is a host netns with one "NIC" (nic0, a veth: MTU 1450, up) that an
// ADD moved into a pod netns as net1 (MTU 9000, another MAC), its record,
// and host-local's lease for it in a temporary data dir: what a pod leaves
// behind when its DEL never comes.
type world struct {
	t       *testing.T
	host    *netnstest.NS
	pod     *netnstest.NS
	podH    *netlink.Handle // holds the pod netns once its path is gone
	store   attachment.Store
	dataDir string
	plugin  *cni.Plugin
	sys     string
	key     attachment.Key
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if _, err := os.Stat(filepath.Join(cniPath, "host-local")); err != nil {
		t.Skip("needs the host-local IPAM plugin in /usr/lib/cni (apt-get install containernetworking-plugins)")
	}
	w := &world{t: t, host: netnstest.New(t), pod: netnstest.New(t), dataDir: filepath.Join(t.TempDir(), "networks"),
		store: attachment.Store{Dir: filepath.Join(t.TempDir(), "state"), BootID: "test-boot"},
		key:   attachment.Key{ContainerID: "c1", IfName: "eth0"}}
	netnstest.Veth(t, w.host, "nic0", "peer0")
	h := netnstest.Handle(t, w.host)
	l, err := h.LinkByName("nic0")
	if err != nil {
		t.Fatal(err)
	}
	must(t, h.LinkSetHardwareAddr(l, mustMAC(hostMAC)))
	peer, err := h.LinkByName("peer0")
	if err != nil {
		t.Fatal(err)
	}
	must(t, h.LinkSetHardwareAddr(peer, mustMAC(peerMAC)))
	must(t, h.LinkSetMTU(l, 1450))
	must(t, h.LinkSetUp(l))
	l, _ = h.LinkByName("nic0")
	hostLink := attachment.HostLink{Name: "nic0", Index: l.Attrs().Index, MTU: 1450, MAC: hostMAC, Up: true}
	// ADD's move: down, into the pod, renamed, MTU and MAC of the pod, up.
	must(t, h.LinkSetDown(l))
	must(t, h.LinkSetNsFd(l, int(w.pod.Handle)))
	w.podH = netnstest.Handle(t, w.pod)
	pl, err := w.podH.LinkByName("nic0")
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.podH.LinkSetName(pl, "net1"))
	must(t, w.podH.LinkSetMTU(pl, 9000))
	must(t, w.podH.LinkSetHardwareAddr(pl, mustMAC(podMAC)))
	must(t, w.podH.LinkSetUp(pl))

	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"rdma","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.9.0.0/24"}]]}}`, w.dataDir)
	w.hostLocal("ADD", conf, "net1")
	rec := attachment.Attachment{Key: w.key, Pod: &attachment.PodRef{Namespace: "ns", Name: "p1", UID: "u1"}, Netns: w.pod.Path,
		CNIVersion: "1.0.0", Network: "rdma", Complete: true, IPAMConf: []byte(conf),
		Devices: []attachment.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr, Host: hostLink, PodIfName: "net1", PodMAC: podMAC, IPAM: true}}}
	must(t, w.store.Save(rec))

	topo := nodesim.Topology{PCI: []nodesim.Function{{Path: "pci0000:00/0000:00:01.0/" + pciAddr, Vendor: "15b3", Device: "1017",
		Class: "020000", Driver: "mlx5_core", NUMANode: -1, Netdevs: []nodesim.Netdev{{Name: "nic0"}}}}}
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	w.sys = tree.SysRoot
	w.plugin = &cni.Plugin{HostNS: w.host.Handle, BootID: w.store.BootID, Links: rdma.Netdevs{}, RDMA: rdma.Devices{},
		IPAM: cni.ExecIPAM(), Resolver: func(root string) cni.Resolver { return discovery.Scanner{SysRoot: root} },
		Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), NetdevReturnWait: 0}
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// hostLocal runs host-local as a runtime would.
func (w *world) hostLocal(command, conf, ifName string) {
	w.t.Helper()
	cmd := exec.Command(filepath.Join(cniPath, "host-local"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + w.key.ContainerID, "CNI_NETNS=" + w.pod.Path,
		"CNI_IFNAME=" + ifName, "CNI_PATH=" + cniPath}
	cmd.Stdin = strings.NewReader(conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		w.t.Fatalf("host-local %s: %v: %s", command, err, out.String())
	}
}

// goneNetns removes the pod netns path, as the runtime does when the
// sandbox dies; the namespace lives on in podH, with net1 in it, until
// kernelReturns: the kernel's cleanup of a dying netns, which moves a
// physical NIC back to the host (down, under name when its own is taken).
func (w *world) goneNetns() {
	w.t.Helper()
	path := w.pod.Path
	must(w.t, w.pod.Remove())
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		w.t.Fatalf("netns path %s still there: %v", path, err)
	}
}

func (w *world) kernelReturns(name string) {
	w.t.Helper()
	l, err := w.podH.LinkByName("net1")
	if err != nil {
		w.t.Fatal(err)
	}
	must(w.t, w.podH.LinkSetDown(l))
	if name != "net1" {
		must(w.t, w.podH.LinkSetName(l, name))
	}
	must(w.t, w.podH.LinkSetNsFd(l, int(w.host.Handle)))
}

// state is what the tests compare: the host's links, the pod's, host-local's
// leases and the records.
type state struct {
	Host, Pod []netnstest.Link
	Leases    []string
	Records   []string
}

func (w *world) state() state {
	w.t.Helper()
	var s state
	s.Host = netnstest.Links(w.t, w.host)
	if ls, err := w.podH.LinkList(); err == nil {
		for _, l := range ls {
			if a := l.Attrs(); a.Name != "lo" {
				s.Pod = append(s.Pod, netnstest.Link{Name: a.Name, MTU: a.MTU, Up: a.Flags&1 != 0, MAC: a.HardwareAddr.String()})
			}
		}
	}
	ents, _ := os.ReadDir(filepath.Join(w.dataDir, "rdma"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "10.") {
			s.Leases = append(s.Leases, e.Name())
		}
	}
	ents, _ = os.ReadDir(w.store.Dir)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			s.Records = append(s.Records, e.Name())
		}
	}
	return s
}

var restored = []netnstest.Link{{Name: "nic0", MTU: 1450, Up: true, MAC: hostMAC}, {Name: "peer0", MTU: 1500, MAC: peerMAC}}

func (w *world) reclaimer(pods Pods) *Reclaimer {
	return New(Config{Restorer: w.plugin, Opts: cni.ReclaimOpts{Store: w.store, CNIPath: cniPath, SysfsRoot: w.sys},
		Pods: pods, Interval: time.Minute, Logger: w.plugin.Log})
}

func kubelet(t *testing.T, pods ...podrestest.Pod) Pods {
	t.Helper()
	srv := podrestest.Start(t, pods...)
	c, err := grpcclient.Dial(srv.Socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var p1 = podrestest.Pod{Namespace: "ns", Name: "p1", Devices: map[string][]string{"rdma.kube-rdma.io/hca": {"mlx5_0"}}}

// TestPass: one pass over a pod's attachment whose DEL never came, by
// what is left of the pod (its netns path, where its NIC is) and what the
// kubelet says. Reclaimed: the NIC back on the host as nic0 with its MAC,
// MTU and up state, host-local's lease released, the record removed, the
// metric's success counted. Left alone: everything as it was. (Before the
// reclaimer, nothing ever finished such a record: every later pod given
// mlx5_0 failed with code 101.)
func TestPass(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gone    bool   // the netns path is removed
		back    string // the kernel returned the NIC under this name
		listed  bool   // the kubelet still lists the pod
		reclaim bool
	}{
		{name: "gone, pod unknown, NIC back as net1", gone: true, back: "net1", reclaim: true},
		{name: "gone, pod unknown, NIC back as dev7", gone: true, back: "dev7", reclaim: true},
		// A NIC the kernel returned under a temporary name is
		// restored at once, however long the kubelet takes.
		{name: "gone, pod listed, NIC back as dev7", gone: true, back: "dev7", listed: true, reclaim: true},
		{name: "gone, pod listed, NIC not back", gone: true, listed: true},
		{name: "netns exists, pod unknown", gone: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			if tc.gone {
				w.goneNetns()
			}
			if tc.back != "" {
				w.kernelReturns(tc.back)
			}
			before := w.state()
			var pods []podrestest.Pod
			if tc.listed {
				pods = append(pods, p1)
			}
			r := w.reclaimer(kubelet(t, pods...))
			r.Pass(context.Background())
			want := before
			if tc.reclaim {
				want = state{Host: restored}
			}
			if diff := cmp.Diff(want, w.state()); diff != "" {
				t.Errorf("after a pass (-want +got):\n%s", diff)
			}
			if got, want := testutil.ToFloat64(r.reclaimed.WithLabelValues("success")), map[bool]float64{true: 1}[tc.reclaim]; got != want {
				t.Errorf("reclaimed{result=success} = %v, want %v", got, want)
			}
		})
	}
}

// TestPassNICNotBackYet: the kubelet no longer lists the pod, but the
// kernel has not returned its NIC yet. The pass fails (counted) and keeps
// the record, having released the lease as DEL does in that case (the pod
// is gone); the next, once the NIC is back, reclaims it.
func TestPassNICNotBackYet(t *testing.T) {
	w := newWorld(t)
	w.goneNetns()
	r := w.reclaimer(kubelet(t))
	want := w.state()
	want.Leases = nil
	r.Pass(context.Background())
	if diff := cmp.Diff(want, w.state()); diff != "" {
		t.Errorf("after a pass without the NIC (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(r.reclaimed.WithLabelValues("failure")); got != 1 {
		t.Errorf("reclaimed{result=failure} = %v, want 1", got)
	}
	w.kernelReturns("dev3")
	r.Pass(context.Background())
	if diff := cmp.Diff(state{Host: restored}, w.state()); diff != "" {
		t.Errorf("after the NIC came back (-want +got):\n%s", diff)
	}
	if got := testutil.ToFloat64(r.reclaimed.WithLabelValues("success")); got != 1 {
		t.Errorf("reclaimed{result=success} = %v, want 1", got)
	}
}

// TestPassWithoutKubelet: with no PodResources to ask, a record whose netns
// is gone and whose devices the kernel did not give back (here: already
// returned by a DEL that crashed before IPAM) is reclaimed only once its
// netns has been seen gone for the grace period.
func TestPassWithoutKubelet(t *testing.T) {
	w := newWorld(t)
	w.goneNetns()
	w.kernelReturns("net1")
	// A DEL got as far as restoring the NIC and marking it returned.
	l, _ := netnstest.Handle(t, w.host).LinkByName("net1")
	if _, err := (rdma.Netdevs{}).Set(w.host.Handle, l.Attrs().Name, rdma.LinkConfig{Name: "nic0", MTU: 1450, MAC: mustMAC(hostMAC), Up: true}); err != nil {
		t.Fatal(err)
	}
	rec, err := w.store.Load(w.key)
	must(t, err)
	rec.Devices[0].Returned = true
	must(t, w.store.Save(rec))

	now := time.Unix(1000, 0)
	r := New(Config{Restorer: w.plugin, Opts: cni.ReclaimOpts{Store: w.store, CNIPath: cniPath, SysfsRoot: w.sys},
		Interval: 30 * time.Second, Grace: time.Minute, Logger: w.plugin.Log, Now: func() time.Time { return now }})
	before := w.state()
	r.Pass(context.Background())
	now = now.Add(59 * time.Second)
	r.Pass(context.Background())
	if diff := cmp.Diff(before, w.state()); diff != "" {
		t.Errorf("within the grace period (-want +got):\n%s", diff)
	}
	now = now.Add(time.Second)
	r.Pass(context.Background())
	if diff := cmp.Diff(state{Host: restored}, w.state()); diff != "" {
		t.Errorf("after the grace period (-want +got):\n%s", diff)
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, _ := net.ParseMAC(s)
	return m
}

// TestPassWaitsForLock: a DEL (or ADD) of another attachment holds the
// node-wide lock: the pass touches nothing until it is released, then
// reclaims. An attachment whose own lock is held (its DEL in flight) is
// left to that DEL.
func TestPassWaitsForLock(t *testing.T) {
	w := newWorld(t)
	w.goneNetns()
	w.kernelReturns("dev9")
	r := w.reclaimer(kubelet(t))

	release, ok, err := w.store.Hold(w.key, false)
	if err != nil || !ok {
		t.Fatalf("hold: %v %v", ok, err)
	}
	before := w.state()
	res := r.Pass(context.Background())
	if len(res) != 1 || res[0].Skipped == "" {
		t.Errorf("pass with the attachment held = %+v, want it skipped", res)
	}
	if diff := cmp.Diff(before, w.state()); diff != "" {
		t.Errorf("with the attachment held (-want +got):\n%s", diff)
	}
	release()

	unlock, err := w.store.Lock()
	must(t, err)
	done := make(chan struct{})
	go func() { r.Pass(context.Background()); close(done) }()
	select {
	case <-done:
		t.Fatal("the pass finished while the node-wide lock was held")
	case <-time.After(300 * time.Millisecond):
	}
	if diff := cmp.Diff(before, w.state()); diff != "" {
		t.Errorf("while the lock is held (-want +got):\n%s", diff)
	}
	unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pass did not finish after the lock was released")
	}
	if diff := cmp.Diff(state{Host: restored}, w.state()); diff != "" {
		t.Errorf("after the lock was released (-want +got):\n%s", diff)
	}
}

// TestReclaimNetnsBack: the plugin's Reclaim judges again under its lock
// and leaves alone a record whose pod netns path exists, whoever asked.
func TestReclaimNetnsBack(t *testing.T) {
	w := newWorld(t)
	before := w.state()
	res := w.plugin.Reclaim(context.Background(), cni.ReclaimOpts{Store: w.store, CNIPath: cniPath, SysfsRoot: w.sys}, []attachment.Key{w.key})
	if diff := cmp.Diff([]cni.ReclaimResult{{Key: w.key, Pod: &attachment.PodRef{Namespace: "ns", Name: "p1", UID: "u1"}, Skipped: "pod netns exists"}}, res); diff != "" {
		t.Errorf("Reclaim (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, w.state()); diff != "" {
		t.Errorf("after Reclaim (-want +got):\n%s", diff)
	}
}
