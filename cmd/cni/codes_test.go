package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// docCodes reads the error codes from the table under "## Errors" in
// docs/cni.md.
func docCodes(t *testing.T) []uint {
	t.Helper()
	f, err := os.Open("../../docs/cni.md")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	row := regexp.MustCompile(`^\| (\d+) \| `)
	var codes []uint
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if len(line) > 3 && line[:3] == "## " {
			in = line == "## Errors"
			continue
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			c, _ := strconv.ParseUint(m[1], 10, 32)
			codes = append(codes, uint(c))
		}
	}
	if len(codes) == 0 {
		t.Fatal("no error table under ## Errors in docs/cni.md")
	}
	return codes
}

// TestDocumentedErrorCodes runs the binary into every error code the table
// in docs/cni.md lists, and fails for a code the table lists that no case
// produces or a case whose code the table does not list.
func TestDocumentedErrorCodes(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "peer0")
	netnstest.Veth(t, host, "nic1", "peer1")
	netnstest.Veth(t, host, "nic2", "peer2") // mlx5_2, in no pool
	netnstest.Veth(t, pod, "taken", "takenp")
	port := nodesim.Port{State: nodesim.StateActive, PhysState: nodesim.PhysLinkUp, LinkLayer: "Ethernet"}
	var topo nodesim.Topology
	for i, addr := range []string{"0000:01:00.0", "0000:02:00.0", "0000:03:00.0"} {
		topo.PCI = append(topo.PCI, nodesim.Function{Path: "pci0000:00/0000:00:01.0/" + addr, Vendor: "15b3", Device: "1017", Class: "020000",
			Driver: "mlx5_core", NUMANode: -1, Netdevs: []nodesim.Netdev{{Name: "nic" + strconv.Itoa(i)}}})
		topo.RDMA = append(topo.RDMA, nodesim.RDMA{Name: "mlx5_" + strconv.Itoa(i), Parent: addr, Ports: []nodesim.Port{port}})
	}
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubelet := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "p", Devices: map[string][]string{"rdma/hca": {"mlx5_0"}}})
	failing := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "p"})
	failing.Fail(errors.New("internal error"))
	stale := filepath.Join(dir, "stale.sock") // a kubelet that is restarting
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	// The host paths are the node file's, one per kubelet socket;
	// requirePodResources is off there but in the "required" cases.
	conf := func(extra string) string {
		return `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","rdmaNetnsMode":"shared"` + extra + `}`
	}
	// The daemon's pools file: mlx5_0 and mlx5_1 (mlx5_2 is in no pool).
	pools, err := nodepools.File{Pools: []nodepools.Pool{{Name: "hca", Mode: "exclusive", Frontend: "devicePlugin",
		Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: "0000:01:00.0"}, {RDMA: "mlx5_1", PCIAddress: "0000:02:00.0"}}}}}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := nodepools.Write(nodepools.Path(filepath.Join(dir, "alloc")), pools); err != nil {
		t.Fatal(err)
	}
	node := func(socket string, required bool) string {
		return writeNodeFile(t, netconf.Node{StateDir: filepath.Join(dir, "state"), SysfsRoot: tree.SysRoot, KubeletSocket: socket,
			AllocDir: filepath.Join(dir, "alloc"), RequirePodResources: &required})
	}
	none := node(filepath.Join(dir, "none.sock"), false)
	noneRequired := node(filepath.Join(dir, "none.sock"), true)
	noPoolsRequired := writeNodeFile(t, netconf.Node{StateDir: filepath.Join(dir, "state"), SysfsRoot: tree.SysRoot,
		KubeletSocket: kubelet.Socket}) // requirePodResources: the default
	kubeletNode, staleNode, failingNode := node(kubelet.Socket, false), node(stale, false), node(failing.Socket, false)
	env := func(command, ifName, args string) []string {
		return []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=ctr1", "CNI_NETNS=" + pod.Path, "CNI_IFNAME=" + ifName,
			"CNI_PATH=/usr/lib/cni", "CNI_ARGS=" + args}
	}
	const podArgs = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"
	dev := func(id string) string { return `,"runtimeConfig":{"deviceID":"` + id + `"}` }

	// mlx5_1 is claimed by another attachment.
	busy := invokeEnv(t, host, conf(dev("mlx5_1")), none, "CNI_COMMAND=ADD", "CNI_CONTAINERID=busy", "CNI_NETNS="+pod.Path,
		"CNI_IFNAME=busy1", "CNI_PATH=/usr/lib/cni")
	if busy.exit != 0 {
		t.Fatalf("ADD of mlx5_1: exit %d", busy.exit)
	}
	var tested []uint
	for _, tc := range []struct {
		code  uint
		what  string
		stdin string
		node  string
		env   []string
	}{
		{1, "unsupported cniVersion", `{"cniVersion":"0.2.0","name":"rdma","type":"kube-rdma"}`, none, env("ADD", "net1", "")},
		{4, "standalone without pod name", conf(`,"resourceName":"rdma/hca"`), kubeletNode, env("ADD", "net1", "")},
		{6, "malformed json", `{"cniVersion":"1.1.0",`, none, env("ADD", "net1", "")},
		{7, "unknown field", conf(`,"master":"eth0"` + dev("mlx5_0")), none, env("ADD", "net1", "")},
		{7, "missing deviceID", conf(""), none, env("ADD", "net1", "")},
		{11, "kubelet not answering", conf(dev("mlx5_0")), staleNode, env("ADD", "net1", podArgs)},
		{50, "standalone without kubelet socket", conf(`,"resourceName":"rdma/hca"`), none, env("ADD", "net1", podArgs)},
		{50, "requirePodResources without kubelet socket", conf(`,"requirePodResources":true` + dev("mlx5_0")), none, env("ADD", "net1", podArgs)},
		{50, "deviceID without kubelet socket, required (the default)", conf(dev("mlx5_0")), noneRequired, env("ADD", "net1", podArgs)},
		{50, "deviceID without the node's pools file, required (the default)", conf(dev("mlx5_0")), noPoolsRequired, env("ADD", "net1", podArgs)},
		{100, "no such device", conf(dev("mlx5_9")), none, env("ADD", "net1", "")},
		{101, "device claimed", conf(dev("mlx5_1")), none, env("ADD", "net1", "")},
		{102, "device not allocated", conf(dev("mlx5_1")), kubeletNode, env("ADD", "net1", podArgs)},
		{102, "device in no pool of the node", conf(dev("mlx5_2")), none, env("ADD", "net1", "")},
		{102, "device in no pool, by PCI address", conf(dev("0000:03:00.0")), kubeletNode, env("ADD", "net1", podArgs)},
		{102, "pod unknown to the kubelet", conf(dev("mlx5_0")), kubeletNode, env("ADD", "net1", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=other")},
		{103, "pod interface name taken", conf(dev("mlx5_0")), none, env("ADD", "taken", "")},
		{104, "CHECK without attachment", conf(dev("mlx5_0")), none, env("CHECK", "net1", "")},
		{999, "kubelet answers an error", conf(dev("mlx5_0")), failingNode, env("ADD", "net1", podArgs)},
	} {
		t.Run(strconv.Itoa(int(tc.code))+" "+tc.what, func(t *testing.T) {
			r := invokeEnv(t, host, tc.stdin, tc.node, tc.env...)
			var got struct {
				Code uint `json:"code"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 || got.Code != tc.code {
				t.Errorf("exit %d, stdout %q: want code %d", r.exit, r.stdout, tc.code)
			}
			if !slices.Contains(docCodes(t), tc.code) {
				t.Errorf("code %d is not in the table in docs/cni.md", tc.code)
			}
		})
		tested = append(tested, tc.code)
	}
	for _, c := range docCodes(t) {
		if !slices.Contains(tested, c) {
			t.Errorf("docs/cni.md lists code %d, which no case produces", c)
		}
	}
}
