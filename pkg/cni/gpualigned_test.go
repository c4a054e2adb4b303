package cni

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/allocator"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestAllocIDPinned pins the allocation ID the CNI computes for a container's
// slots against sha256 computed here and a fixed value, so that the device
// plugin's (which names the directory) and the CNI's (which fills it) can be
// checked against each other: both use allocdir.AllocID.
func TestAllocIDPinned(t *testing.T) {
	slots := []string{"gpu-nics-slot-1", "gpu-nics-slot-0", "gpu-nics-slot-10"}
	sum := sha256.Sum256([]byte("gpu-nics-slot-0,gpu-nics-slot-1,gpu-nics-slot-10"))
	want := hex.EncodeToString(sum[:])[:16]
	// printf 'gpu-nics-slot-0,gpu-nics-slot-1,gpu-nics-slot-10' | sha256sum | cut -c1-16
	if want != "a137a9cdbc2dd6dd" {
		t.Fatalf("sha256 prefix = %s, want a137a9cdbc2dd6dd", want)
	}
	if got := allocdir.AllocID(slots); got != want {
		t.Errorf("AllocID(%q) = %s, want %s (sorted as strings, joined with \",\")", slots, got, want)
	}
	if got := allocdir.AllocID([]string{"gpu-nics-slot-0", "gpu-nics-slot-1"}); got != "b5871414ab800ca8" {
		t.Errorf("AllocID(slot-0, slot-1) = %s, want b5871414ab800ca8 (the device plugin's pinned value)", got)
	}
}

const (
	gpuPool     = "gpu-nics"
	gpuResource = "rdma.example.com/gpu-nics"
)

// gpuEnv is env on the RoCESRIOV fixture node (nodesim, the kernel's sysfs
// layout, with NVIDIA procfs): four PCIe switches, each with two A100s and
// two ConnectX-6 Dx PFs, so GPU 2s and 2s+1 are PIX to mlx5_{2s} and
// mlx5_{2s+1}. The pool is the eight PFs; their netdevs gpu<N>rdma0 are
// real veth links in a throw-away host netns. RDMA netlink is the fake of
// env_test.go (this test kernel has no RDMA subsystem), in exclusive mode
// unless asked otherwise.
type gpuEnv struct {
	*env
	allocDir string
	procRoot string
	uuids    []string // by GPU index (minor)
	srv      *podrestest.Server
}

func newGPUEnv(t *testing.T, mode rdma.NetnsMode) *gpuEnv {
	t.Helper()
	host := netnstest.New(t)
	var members []string
	for i := range 8 {
		netnstest.Veth(t, host, fmt.Sprintf("gpu%drdma0", i), fmt.Sprintf("gpupeer%d", i))
		members = append(members, fmt.Sprintf("mlx5_%d", i))
	}
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatalf("build sysfs fixture: %v", err)
	}
	gpus, _, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.GPUs()
	if err != nil || len(gpus) != 8 {
		t.Fatalf("fixture gpus: %v, %v", gpus, err)
	}
	uuids := make([]string, 8)
	for _, g := range gpus {
		uuids[*g.Minor] = g.UUID
	}
	f := newFakeRDMA(t, mode, host.Handle, members)
	e := &env{t: t, host: host, sys: tree.SysRoot, stateDir: filepath.Join(t.TempDir(), "state"), rdma: f, mode: mode}
	e.p = &Plugin{
		HostNS:       host.Handle,
		Links:        rdma.Netdevs{},
		Addrs:        routeAddrs{},
		RDMA:         f,
		IPAM:         execIPAM{},
		Resolver:     func(root string) Resolver { return discovery.Scanner{SysRoot: root} },
		GPUs:         scannerGPUs,
		PodResources: dialPodResources,
		Log:          slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		SoftRDMAWait: 300 * time.Millisecond,
		BootID:       "test-boot",
	}
	g := &gpuEnv{env: e, allocDir: filepath.Join(t.TempDir(), "alloc"), procRoot: tree.ProcRoot, uuids: uuids}
	g.srv = podrestest.Start(t)
	e.socket = g.srv.Socket
	g.writePool(members, members)
	// Another pool's file, which the CNI must pass over.
	other := allocdir.PoolFile{Pool: "other", Resource: "rdma.example.com/other", Binding: allocdir.BindingGPUAligned, Members: []string{"mlx5_9"}}
	g.writePoolFile(other)
	return g
}

func (g *gpuEnv) writePool(members, healthy []string) {
	g.writePoolFile(allocdir.PoolFile{Pool: gpuPool, Resource: gpuResource, Binding: allocdir.BindingGPUAligned, Members: members, Healthy: healthy})
}

func (g *gpuEnv) writePoolFile(pf allocdir.PoolFile) {
	g.t.Helper()
	b, err := pf.Marshal()
	if err != nil {
		g.t.Fatal(err)
	}
	if err := allocdir.WritePoolFile(g.allocDir, pf.Pool, b); err != nil {
		g.t.Fatal(err)
	}
}

func (g *gpuEnv) conf() []byte {
	// Set only when they differ: concurrent ADDs call conf while the
	// plugin reads the Node built from them.
	if g.env.allocDir != g.allocDir || g.env.procRoot != g.procRoot {
		g.env.allocDir, g.env.procRoot = g.allocDir, g.procRoot
	}
	return g.env.conf("1.1.0", fmt.Sprintf(`"resourceName":%q`, gpuResource))
}

// slots returns slot IDs of the pool.
func slots(idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, allocdir.SlotID(gpuPool, i))
	}
	return out
}

// gpuPod is one pod: per container its slots and GPU IDs.
type gpuPod struct {
	name string
	ctrs []gpuCtr
}

type gpuCtr struct {
	slots []string
	gpus  []string
}

func (p gpuPod) kubelet() podrestest.Pod {
	out := podrestest.Pod{Namespace: "ns", Name: p.name}
	for i, c := range p.ctrs {
		devs := map[string][]string{}
		if len(c.slots) > 0 {
			devs[gpuResource] = c.slots
		}
		if len(c.gpus) > 0 {
			devs["nvidia.com/gpu"] = c.gpus
		}
		out.Containers = append(out.Containers, podrestest.Container{Name: fmt.Sprintf("c%d", i), Devices: devs})
	}
	return out
}

func (g *gpuEnv) args(p gpuPod, podNS *netnstest.NS) *skel.CmdArgs {
	a := args(p.name, podNS, "eth0", g.conf())
	a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + p.name
	return a
}

// boundNICs reads the record's devices ("mlx5_0=net1") and binding.
func (g *gpuEnv) bound(t *testing.T, p gpuPod) ([]string, *attachment.Binding) {
	t.Helper()
	rec, err := attachment.Store{Dir: g.stateDir}.Load(attachment.Key{ContainerID: p.name, IfName: "eth0"})
	if err != nil {
		t.Fatalf("record of %s: %v", p.name, err)
	}
	var out []string
	for _, d := range rec.Devices {
		out = append(out, d.RDMA+"="+d.PodIfName)
	}
	return out, rec.Binding
}

func (g *gpuEnv) allocPath(s []string, file string) string {
	return filepath.Join(allocdir.AllocPath(g.allocDir, gpuPool, allocdir.AllocID(s)), file)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

// TestGPUAlignedTwoPods: two pods with different GPUs (named by UUID, and
// by index = minor number) get the NICs under their GPUs' switches, in
// their netns, with the record's binding and each container's nccl.conf,
// env and binding.json; DEL frees the NICs for the next pod and leaves the
// allocation directories to the daemon.
func TestGPUAlignedTwoPods(t *testing.T) {
	g := newGPUEnv(t, rdma.NetnsExclusive)
	before := g.snapshot()
	a := gpuPod{name: "a", ctrs: []gpuCtr{{slots: slots(5, 0), gpus: []string{g.uuids[1], g.uuids[0]}}}}
	// b: two containers, one GPU each, by index; GPUs 4 and 6 sit under
	// different switches.
	b := gpuPod{name: "b", ctrs: []gpuCtr{{slots: slots(1), gpus: []string{"4"}}, {slots: slots(2), gpus: []string{"6"}}}}
	g.srv.SetPods(a.kubelet(), b.kubelet())
	podA, podB := netnstest.New(t), netnstest.New(t)
	resA := mustAdd(t, g.env, g.args(a, podA))
	mustAdd(t, g.env, g.args(b, podB))

	for _, tc := range []struct {
		pod     gpuPod
		ns      *netnstest.NS
		devices []string
		pairs   []attachment.BindingPair
		hca     string
	}{
		{a, podA, []string{"mlx5_0=net1", "mlx5_1=net2"}, []attachment.BindingPair{
			{GPU: "0000:14:00.0", GPUID: g.uuids[1], NIC: "mlx5_1", Level: "PIX"},
			{GPU: "0000:13:00.0", GPUID: g.uuids[0], NIC: "mlx5_0", Level: "PIX"}}, "mlx5_0,mlx5_1"},
		{b, podB, []string{"mlx5_4=net1", "mlx5_6=net2"}, []attachment.BindingPair{
			{GPU: "0000:93:00.0", GPUID: "4", NIC: "mlx5_4", Level: "PIX"},
			{GPU: "0000:b3:00.0", GPUID: "6", NIC: "mlx5_6", Level: "PIX"}}, "mlx5_4,mlx5_6"},
	} {
		devs, bind := g.bound(t, tc.pod)
		if diff := cmp.Diff(tc.devices, devs); diff != "" {
			t.Errorf("%s: devices (-want +got):\n%s", tc.pod.name, diff)
		}
		var ids []string
		for _, c := range tc.pod.ctrs {
			ids = append(ids, allocdir.AllocID(c.slots))
		}
		want := &attachment.Binding{Pool: gpuPool, Pairs: tc.pairs, AllocIDs: ids}
		if diff := cmp.Diff(want, bind); diff != "" {
			t.Errorf("%s: binding (-want +got):\n%s", tc.pod.name, diff)
		}
		var links []string
		for _, l := range netnstest.Links(t, tc.ns) {
			links = append(links, l.Name)
		}
		if diff := cmp.Diff([]string{"net1", "net2"}, links); diff != "" {
			t.Errorf("%s: pod links (-want +got):\n%s", tc.pod.name, diff)
		}
		// Every container's directory: the RoCE v2 GID with the IPv4-mapped
		// address is at index 3 on these ports.
		for _, c := range tc.pod.ctrs {
			if got, want := readFile(t, g.allocPath(c.slots, "nccl.conf")), "NCCL_IB_HCA=="+tc.hca+"\nNCCL_IB_GID_INDEX=3\n"; got != want {
				t.Errorf("%s: nccl.conf = %q, want %q", tc.pod.name, got, want)
			}
			wantEnv := "export NCCL_IB_HCA='=" + tc.hca + "'\nexport NCCL_IB_GID_INDEX=3\nexport UCX_IB_GID_INDEX=3\n" +
				"export UCX_NET_DEVICES='" + strings.ReplaceAll(tc.hca, ",", ":1,") + ":1'\n" +
				"export KUBE_RDMA_GPU_NICS_RDMA_DEVICES='" + tc.hca + "'\nexport KUBE_RDMA_GPU_NICS_NETDEVS='net1,net2'\n"
			if got := readFile(t, g.allocPath(c.slots, "env")); got != wantEnv {
				t.Errorf("%s: env = %q, want %q", tc.pod.name, got, wantEnv)
			}
			var bf bindingFile
			if err := json.Unmarshal([]byte(readFile(t, g.allocPath(c.slots, "binding.json"))), &bf); err != nil {
				t.Fatal(err)
			}
			if bf.Pool != gpuPool || len(bf.Pairs) != len(tc.pairs) || len(bf.GPUs) != len(tc.pairs) {
				t.Errorf("%s: binding.json = %+v", tc.pod.name, bf)
			}
			for i, p := range bf.Pairs {
				if p.NIC != tc.pairs[i].NIC || string(p.Level) != tc.pairs[i].Level || bf.GPUs[p.GPU].PCIAddress != tc.pairs[i].GPU {
					t.Errorf("%s: binding.json pair %d = %+v (gpu %+v), want %+v", tc.pod.name, i, p, bf.GPUs[p.GPU], tc.pairs[i])
				}
			}
		}
	}
	if len(resA.Interfaces) != 2 || resA.Interfaces[0].Name != "net1" {
		t.Errorf("result interfaces %+v", resA.Interfaces)
	}
	if err := g.p.Check(context.Background(), g.args(a, podA)); err != nil {
		t.Errorf("CHECK: %v", err)
	}

	// DEL a: its NICs go home, its files stay for the daemon; the next pod
	// on GPUs 0 and 1 gets them.
	if err := g.p.Del(context.Background(), g.args(a, podA)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, err := os.Stat(g.allocPath(a.ctrs[0].slots, "nccl.conf")); err != nil {
		t.Errorf("DEL removed the allocation directory's files: %v", err)
	}
	c := gpuPod{name: "c", ctrs: []gpuCtr{{slots: slots(0, 3), gpus: []string{g.uuids[0], g.uuids[1]}}}}
	g.srv.SetPods(b.kubelet(), c.kubelet())
	podC := netnstest.New(t)
	mustAdd(t, g.env, g.args(c, podC))
	if devs, _ := g.bound(t, c); !cmp.Equal(devs, []string{"mlx5_0=net1", "mlx5_1=net2"}) {
		t.Errorf("pod after DEL got %v, want mlx5_0 and mlx5_1", devs)
	}
	for _, p := range []struct {
		pod gpuPod
		ns  *netnstest.NS
	}{{b, podB}, {c, podC}} {
		if err := g.p.Del(context.Background(), g.args(p.pod, p.ns)); err != nil {
			t.Fatalf("DEL %s: %v", p.pod.name, err)
		}
	}
	if diff := cmp.Diff(before, g.snapshot()); diff != "" {
		t.Errorf("after every DEL (-before +after):\n%s", diff)
	}
}

// TestGPUAlignedConcurrent: four pods ADD at once, all on the same two GPUs,
// two slots each: the node-wide lock gives each two NICs no other pod has,
// the first the two under the GPUs' switch. A fifth finds none free: an
// error with the device-in-use code, host and allocation directory
// unchanged.
func TestGPUAlignedConcurrent(t *testing.T) {
	g := newGPUEnv(t, rdma.NetnsExclusive)
	before := g.snapshot()
	var pods []gpuPod
	var kube []podrestest.Pod
	for i := range 5 {
		p := gpuPod{name: fmt.Sprintf("p%d", i), ctrs: []gpuCtr{{slots: slots(2*i, 2*i+1), gpus: []string{g.uuids[0], g.uuids[1]}}}}
		pods = append(pods, p)
		kube = append(kube, p.kubelet())
	}
	g.srv.SetPods(kube...)
	nss := make([]*netnstest.NS, 5)
	for i := range nss {
		nss[i] = netnstest.New(t)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	confs := make([]*skel.CmdArgs, 4)
	for i := range confs { // before the goroutines: conf sets the plugin's Node
		confs[i] = g.args(pods[i], nss[i])
	}
	for i := range 4 {
		wg.Go(func() {
			_, errs[i] = g.p.Add(context.Background(), confs[i])
		})
	}
	wg.Wait()
	holder := map[string]string{}
	pix := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("ADD %s: %v", pods[i].name, errs[i])
		}
		_, bind := g.bound(t, pods[i])
		for _, pr := range bind.Pairs {
			if h, ok := holder[pr.NIC]; ok {
				t.Errorf("%s bound to %s and %s", pr.NIC, h, pods[i].name)
			}
			holder[pr.NIC] = pods[i].name
			if pr.Level == "PIX" {
				pix++
			}
		}
		if got := len(netnstest.Links(t, nss[i])); got != 2 {
			t.Errorf("%s has %d links, want 2", pods[i].name, got)
		}
	}
	if len(holder) != 8 || pix != 2 {
		t.Errorf("bound %v (%d at PIX), want all 8 NICs once, 2 at PIX", holder, pix)
	}

	mid := g.snapshot(nss[4])
	_, err := g.p.Add(context.Background(), g.args(pods[4], nss[4]))
	if !errors.Is(err, ErrDeviceInUse) || cniCode(err) != CodeDeviceInUse {
		t.Errorf("ADD with no NIC free = %v, want ErrDeviceInUse (code %d)", err, CodeDeviceInUse)
	}
	if diff := cmp.Diff(mid, g.snapshot(nss[4])); diff != "" {
		t.Errorf("failed ADD changed the host (-before +after):\n%s", diff)
	}
	if _, err := os.Stat(g.allocPath(pods[4].ctrs[0].slots, "nccl.conf")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed ADD left nccl.conf (%v)", err)
	}
	for i := range 4 {
		if err := g.p.Del(context.Background(), g.args(pods[i], nss[i])); err != nil {
			t.Errorf("DEL %s: %v", pods[i].name, err)
		}
	}
	if diff := cmp.Diff(before, g.snapshot()); diff != "" {
		t.Errorf("after every DEL (-before +after):\n%s", diff)
	}
}

// TestGPUAlignedChoices: a pod without GPUs gets a compact set; unhealthy
// members are not bound; a GPU the node does not have is a clear error
// (code 100), not a silent SYS pairing; outside exclusive mode the binding
// is refused (code 50). Failed ADDs leave the host as it was.
func TestGPUAlignedChoices(t *testing.T) {
	g := newGPUEnv(t, rdma.NetnsExclusive)
	before := g.snapshot()
	// first takes mlx5_0 (PIX to GPU 0); the pod without GPUs then gets two
	// NICs under one switch (mlx5_2, mlx5_3), not mlx5_1 and mlx5_2.
	first := gpuPod{name: "first", ctrs: []gpuCtr{{slots: slots(0), gpus: []string{g.uuids[0]}}}}
	nogpu := gpuPod{name: "nogpu", ctrs: []gpuCtr{{slots: slots(1, 2)}}}
	// mlx5_5 is unhealthy: GPU 5's pod gets mlx5_4, its switch's other NIC.
	sick := gpuPod{name: "sick", ctrs: []gpuCtr{{slots: slots(3), gpus: []string{"5"}}}}
	missing := gpuPod{name: "missing", ctrs: []gpuCtr{{slots: slots(4), gpus: []string{"GPU-00000000-0000-0000-0000-000000000000"}}}}
	g.srv.SetPods(first.kubelet(), nogpu.kubelet(), sick.kubelet(), missing.kubelet())
	var members []string
	for i := range 8 {
		members = append(members, "mlx5_"+strconv.Itoa(i))
	}
	g.writePool(members, slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == "mlx5_5" }))
	nss := map[string]*netnstest.NS{}
	for _, p := range []gpuPod{first, nogpu, sick} {
		nss[p.name] = netnstest.New(t)
		mustAdd(t, g.env, g.args(p, nss[p.name]))
	}
	for _, tc := range []struct {
		pod  gpuPod
		want []string
	}{
		{first, []string{"mlx5_0=net1"}},
		{nogpu, []string{"mlx5_2=net1", "mlx5_3=net2"}},
		{sick, []string{"mlx5_4=net1"}},
	} {
		devs, bind := g.bound(t, tc.pod)
		if diff := cmp.Diff(tc.want, devs); diff != "" {
			t.Errorf("%s: devices (-want +got):\n%s", tc.pod.name, diff)
		}
		if bind == nil || bind.Pool != gpuPool {
			t.Errorf("%s: binding %+v", tc.pod.name, bind)
		}
	}
	if got := readFile(t, g.allocPath(nogpu.ctrs[0].slots, "nccl.conf")); got != "NCCL_IB_HCA==mlx5_2,mlx5_3\nNCCL_IB_GID_INDEX=3\n" {
		t.Errorf("no-GPU pod's nccl.conf = %q", got)
	}
	var bf bindingFile
	if err := json.Unmarshal([]byte(readFile(t, g.allocPath(nogpu.ctrs[0].slots, "binding.json"))), &bf); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bindingFile{Pool: gpuPool, Alignment: allocator.Alignment{NICs: []string{"mlx5_2", "mlx5_3"}}, GPUs: []bindingGPU{}, Netdevs: []string{"net1", "net2"}}, bf); diff != "" {
		t.Errorf("no-GPU pod's binding.json (-want +got):\n%s", diff)
	}

	podM := netnstest.New(t)
	mid := g.snapshot(podM)
	_, err := g.p.Add(context.Background(), g.args(missing, podM))
	if !errors.Is(err, ErrDeviceNotFound) || cniCode(err) != CodeDeviceNotFound {
		t.Errorf("ADD with a GPU not on the node = %v, want ErrDeviceNotFound", err)
	}
	if diff := cmp.Diff(mid, g.snapshot(podM)); diff != "" {
		t.Errorf("failed ADD changed the host (-before +after):\n%s", diff)
	}
	for _, p := range []gpuPod{first, nogpu, sick} {
		if err := g.p.Del(context.Background(), g.args(p, nss[p.name])); err != nil {
			t.Errorf("DEL %s: %v", p.name, err)
		}
	}
	if diff := cmp.Diff(before, g.snapshot()); diff != "" {
		t.Errorf("after every DEL (-before +after):\n%s", diff)
	}

	t.Run("shared netns mode is refused", func(t *testing.T) {
		g := newGPUEnv(t, rdma.NetnsShared)
		p := gpuPod{name: "p", ctrs: []gpuCtr{{slots: slots(0), gpus: []string{g.uuids[0]}}}}
		g.srv.SetPods(p.kubelet())
		pod := netnstest.New(t)
		before := g.snapshot(pod)
		_, err := g.p.Add(context.Background(), g.args(p, pod))
		if !errors.Is(err, ErrNotAvailable) || cniCode(err) != 50 {
			t.Errorf("ADD in shared mode = %v, want ErrNotAvailable (50)", err)
		}
		if diff := cmp.Diff(before, g.snapshot(pod)); diff != "" {
			t.Errorf("failed ADD changed the host (-before +after):\n%s", diff)
		}
	})
}
