package suite

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/internal/fakerdma"
	agentconfig "github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// The local-node harness (e2e/local-node): one node on this machine whose RDMA devices are
// the fixture nodesim.LocalNode written below its fixture directory (up.sh). Its hook
// describes it:
//
//	harness local-node, node, test-image, image (the kube-rdma image, REPO:TAG), node-run
//	(the node's state directory), fixture (the fixture's root), fixture-vfs, api-port,
//	metrics-port, cni-state-dir, rdma-ipam-dir, nad-crd (a CRD file for the dry runs),
//	gpu-dra-driver (the driver name of the stand-in GPU DRA driver, hook start fakegpudra),
//	memlock-raisable (yes: root may raise RLIMIT_MEMLOCK above containerd's hard limit),
//	memlock-hard-kib; prev-release, prev-chart, prev-image (REPO:TAG): the previous release's
//	commit, chart directory and kube-rdma image, once the harness built it (e2e/local-node/prev.sh);
//	prev-fakerdma-image: its fakerdma variant, once imported too
//
// Twelve phases, each with the chart's values and the answers computed here from the fixture:
// device-plugin (pools of every kind, chained CNI, NRI), gpu-aligned (a gpuAligned pool with
// a stand-in GPU device plugin and the fake RDMA netlink image), dra (pools served as a DRA
// driver beside a stand-in GPU DRA driver), then upgrade, upgrade-gpu-aligned and upgrade-dra:
// the previous release with the values of device-plugin, gpu-aligned and dra, upgraded to the
// working tree, rolled back and upgraded again while pods are created (skipped without
// prev-*; upgrade-gpu-aligned also without prev-fakerdma-image), and faults (the
// device-plugin phase's values, then one fault after another, each followed by one invariant
// check: faults_test.go), faults-dra (the dra phase's values, the DRA front end's faults:
// drafaults_test.go), and dra-shared (one HCA in a shared dra pool of 3 slots: three claims
// share it through DRA consumable capacity: drashared_test.go), and multus (Multus's thick
// plugin in front of the node's network, the chart in multus mode: multus_test.go), and rails
// (one NCCL pool per rail with NRI: a pod's NCCL and UCX variables name the devices of all of
// them: multipool_test.go), and defaults (the chart's default pools, a port of the shared
// pool's set down: health_test.go).
// cni-e2e-binary: the CNI plugin built with kuberdma_e2e (its fault hook), when images.sh
// kept it.

// localNodeDesc is the local node's hook description, parsed.
type localNodeDesc struct {
	node, testImage, imageRepo, imageTag string
	// fromRegistry: the harness pushed the image and the chart to a registry (image-digest,
	// chart: registry_test.go); the chart's defaults name the image, containerd pulls it.
	fromRegistry                         bool
	nodeRun, fixture, cniState, rdmaIPAM string
	nadCRD, memlockHardKiB               string
	gpuDRADriver                         string // fakegpudra's driver name, also its DeviceClass's
	cniE2EBinary                         string // the CNI plugin built with kuberdma_e2e ("": none)
	// The Multus thick plugin's chart and image (multus-chart, multus-image; "": none).
	multusChart, multusImage string
	// The previous release (prev-*): "" when the harness did not build it.
	prevRelease, prevChart, prevImageRepo, prevImageTag string
	prevFakeRDMA                                        bool // prev-fakerdma-image: REPO:TAG-fakerdma of prev-image
	vfs, apiPort, metricsPort                           int
	memlockRaisable                                     bool
	fix                                                 fixtureNode
}

// fixtureNode is what the phases need of nodesim.LocalNode, in topology order (RDMA device
// names follow it: mlx5_0 and mlx5_1 the HCAs, mlx5_2 the PF, mlx5_3... its VFs).
type fixtureNode struct {
	ib  []string // the InfiniBand HCAs' RDMA devices
	pfs []string // the RoCE PFs'
	vfs []string // the RoCE VFs'
	// gpuNICs: for each GPU (by UUID, as the fixture's procfs gives it) the InfiniBand HCA on
	// its PCIe switch and the HCA's netdev.
	gpuNICs map[string]gpuNIC
}

// fixtureOf reads the fixture's layout: which RDMA devices are which kind, and each GPU's NIC.
func fixtureOf(t nodesim.Topology) (fixtureNode, error) {
	fn := map[string]nodesim.Function{} // by PCI address
	for _, f := range t.PCI {
		fn[path.Base(f.Path)] = f
	}
	// A function's PCIe switch: its path less the downstream port and itself.
	sw := func(f nodesim.Function) string { return path.Dir(path.Dir(f.Path)) }
	out := fixtureNode{gpuNICs: map[string]gpuNIC{}}
	ibBySwitch := map[string]gpuNIC{}
	for _, r := range t.RDMA {
		f, ok := fn[r.Parent]
		if !ok || len(r.Ports) == 0 {
			return out, fmt.Errorf("fixture %s: RDMA device %s: no PCI function %s or no port", t.Name, r.Name, r.Parent)
		}
		switch {
		case r.Ports[0].LinkLayer == "InfiniBand":
			out.ib = append(out.ib, r.Name)
			if len(f.Netdevs) > 0 {
				ibBySwitch[sw(f)] = gpuNIC{rdma: r.Name, netdev: f.Netdevs[0].Name}
			}
		case f.PhysFn != "":
			out.vfs = append(out.vfs, r.Name)
		default:
			out.pfs = append(out.pfs, r.Name)
		}
	}
	for _, f := range t.PCI {
		if f.UUID == "" {
			continue
		}
		nic, ok := ibBySwitch[sw(f)]
		if !ok {
			return out, fmt.Errorf("fixture %s: GPU %s has no InfiniBand HCA on its switch", t.Name, f.UUID)
		}
		out.gpuNICs[f.UUID] = nic
	}
	return out, nil
}

func parseLocalNode(d map[string]string) (localNodeDesc, error) {
	l := localNodeDesc{node: d["node"], testImage: d["test-image"], nodeRun: d["node-run"], fixture: d["fixture"],
		cniState: d["cni-state-dir"], rdmaIPAM: d["rdma-ipam-dir"], nadCRD: d["nad-crd"], gpuDRADriver: d["gpu-dra-driver"],
		memlockHardKiB: d["memlock-hard-kib"], memlockRaisable: d["memlock-raisable"] == "yes",
		cniE2EBinary: d["cni-e2e-binary"], multusChart: d["multus-chart"], multusImage: d["multus-image"]}
	for k, v := range map[string]string{"node": l.node, "node-run": l.nodeRun, "fixture": l.fixture,
		"cni-state-dir": l.cniState, "rdma-ipam-dir": l.rdmaIPAM, "nad-crd": l.nadCRD, "image": d["image"],
		"gpu-dra-driver": l.gpuDRADriver} {
		if v == "" {
			return l, fmt.Errorf("hook describe (local-node): no %s", k)
		}
	}
	i := strings.LastIndex(d["image"], ":")
	if i <= 0 || i == len(d["image"])-1 {
		return l, fmt.Errorf("hook describe: image %q: want REPOSITORY:TAG", d["image"])
	}
	l.imageRepo, l.imageTag = d["image"][:i], d["image"][i+1:]
	l.fromRegistry = d["image-digest"] != ""
	if d["prev-chart"] != "" {
		l.prevRelease, l.prevChart = d["prev-release"], d["prev-chart"]
		i := strings.LastIndex(d["prev-image"], ":")
		if l.prevRelease == "" || i <= 0 || i == len(d["prev-image"])-1 {
			return l, fmt.Errorf("hook describe: prev-chart %q with prev-release %q and prev-image %q: want a commit and REPOSITORY:TAG",
				l.prevChart, l.prevRelease, d["prev-image"])
		}
		l.prevImageRepo, l.prevImageTag = d["prev-image"][:i], d["prev-image"][i+1:]
		if f := d["prev-fakerdma-image"]; f != "" {
			if f != d["prev-image"]+"-fakerdma" {
				return l, fmt.Errorf("hook describe: prev-fakerdma-image %q: want %s-fakerdma", f, d["prev-image"])
			}
			l.prevFakeRDMA = true
		}
	}
	for k, p := range map[string]*int{"fixture-vfs": &l.vfs, "api-port": &l.apiPort, "metrics-port": &l.metricsPort} {
		n, err := strconv.Atoi(d[k])
		if err != nil || n < 1 {
			return l, fmt.Errorf("hook describe: %s %q: want a positive number", k, d[k])
		}
		*p = n
	}
	var err error
	l.fix, err = fixtureOf(nodesim.LocalNode(l.vfs))
	return l, err
}

// localNode is the local-node harness's phases.
func localNode(d map[string]string) (harness, error) {
	l, err := parseLocalNode(d)
	if err != nil {
		return harness{}, err
	}
	if len(l.fix.ib) < 2 || len(l.fix.pfs) != 1 || len(l.fix.vfs) < 2 || len(l.fix.gpuNICs) < 2 {
		return harness{}, fmt.Errorf("fixture: %d HCAs, %d PFs, %d VFs, %d GPUs: the phases need 2+, 1, 2+, 2+",
			len(l.fix.ib), len(l.fix.pfs), len(l.fix.vfs), len(l.fix.gpuNICs))
	}
	return harness{
		node:  l.node,
		setup: l.setup,
		phases: []phase{l.devicePluginPhase(), l.gpuAlignedPhase(), l.draPhase(), l.upgradePhase(),
			l.upgradeGPUAlignedPhase(), l.upgradeDRAPhase(), l.faultsPhase(), l.faultsDRAPhase(), l.draSharedPhase(),
			l.multusPhase(), l.railsPhase(), l.defaultsPhase()},
	}, nil
}

// common is what every phase of this node expects: its devices are fixtures, the port-down
// test's device, the daemon's /state and /metrics.
func (l localNodeDesc) common(c *config) {
	c.fixtureDevs = true
	c.portDevice = l.fix.ib[1] // the second HCA
	c.daemonState = fmt.Sprintf("http://127.0.0.1:%d/state", l.metricsPort)
	c.daemonMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", l.metricsPort)
}

// nodeValues are what every phase's install shares: the image, the node's paths and the API
// server's own address.
func (l localNodeDesc) nodeValues() values {
	v := values{
		"image":  values{"repository": l.imageRepo, "tag": l.imageTag, "pullPolicy": "Never"},
		"config": values{"resourcePrefix": "rdma.kube-rdma.io"},
		"devicePlugin": values{
			"cdiDir":      l.nodeRun + "/cdi",
			"metricsPort": l.metricsPort,
			// No kube-proxy on this node: the service address the in-cluster config names
			// (10.96.0.1) does not answer, so the node-state publisher and the DRA driver go
			// to the API server directly.
			"extraEnv": []values{
				{"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
				{"name": "KUBERNETES_SERVICE_PORT", "value": strconv.Itoa(l.apiPort)},
			},
		},
		"hostPaths": values{"sysfsRoot": l.fixture + "/sys", "kubeletDir": l.nodeRun + "/kubelet"},
		"cni": values{"binDir": l.nodeRun + "/cni/bin", "confDir": l.nodeRun + "/cni/net.d",
			// The daemon's reclaimer of attachments whose DEL never came: this node's IPAM
			// data dir (the chained network's dataDir) and containerd's netns dir: with
			// netns_mounts_under_state_dir, containerd 2.2 mounts them under its CRI plugin's
			// state dir (up.sh makes it a shared mount), not containerd/state/netns, where no
			// netns is: a reclaimer pointed there sees none of them and judges none (a path
			// in a directory it does not see is left to DEL and GC).
			"reclaim": values{"ipamDataDir": l.rdmaIPAM, "netnsDir": l.nodeRun + "/containerd/state/io.containerd.grpc.v1.cri/netns"}},
	}
	if !l.memlockRaisable {
		// The memlock hook raises a container's limit from the host, which here takes the
		// CAP_SYS_RESOURCE this machine's root lacks: every pool left at the default
		// (unlimited) would fail to start its pods. The hook is checked where the
		// capability is (the rxe-cluster e2e's guests).
		v["devicePlugin"].(values)["memlockHookDir"] = ""
	}
	if l.fromRegistry {
		delete(v, "image") // the chart's defaults: the image its release pushed beside it
	}
	return v
}

// prevNodeValues are nodeValues without what the previous release's chart does not know (its
// values schema refuses unknown keys): cni.reclaim and devicePlugin.memlockHookDir came after
// it.
func (l localNodeDesc) prevNodeValues() values {
	v := l.nodeValues()
	cni := maps.Clone(v["cni"].(values))
	delete(cni, "reclaim")
	v["cni"] = cni
	dp := maps.Clone(v["devicePlugin"].(values))
	delete(dp, "memlockHookDir")
	v["devicePlugin"] = dp
	return v
}

func (l localNodeDesc) cniLog() string { return l.nodeRun + "/logs/kube-rdma-cni.log" }

// memlockLimits are the pools' memlock values and the RLIMIT_MEMLOCK each gives a container.
// runc raises a container's limit from the host; above the runtime's own hard limit that
// takes CAP_SYS_RESOURCE, which root has on a node but not in some sandboxes (containerd then
// keeps the 8 MiB hard limit it started with). There the pools get limits below it (the same
// mechanism, lowering instead of raising), or every pod with a device would fail to start.
func (l localNodeDesc) memlockLimits() (ib, others string, want map[string]string) {
	if l.memlockRaisable {
		return "512Mi", "", map[string]string{"ib": "536870912", "vf": "unlimited", "roce-shared": "unlimited"}
	}
	return "4Mi", "6Mi", map[string]string{"ib": "4194304", "vf": "6291456", "roce-shared": "6291456"}
}

// devicePluginPhase: pools of every kind on the fixture node: exclusive InfiniBand HCAs,
// exclusive RoCE VFs whose netdevs the chained CNI entry moves into pods, the RoCE PF shared
// by 8 pods. ib is NCCL's fabric; the others set no NCCL_* (nccl: false), so a pod with ib
// and vf gets ib's NCCL_IB_HCA. containerd runs with NRI on (up.sh): the daemon's NRI plugin
// sets RLIMIT_MEMLOCK of the containers with our devices (the pools' memlock).
func (l localNodeDesc) devicePluginPhase() phase {
	v, cfg := l.devicePluginValues()
	return phase{
		name:   "device-plugin",
		config: cfg,
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v},
			report: "chart installed, DaemonSet ready: %s s"}},
		tests: []namedTest{
			{"ImageFromRegistry", testImageFromRegistry},
			{"Allocatable", testAllocatable},
			{"PodWithDevices", testPodWithDevices},
			{"PlainPodNoKubeletCall", testPlainPodNoKubeletCall},
			{"Pending", testPending},
			{"PortDown", testPortDown},
			{"KubeletRestart", testKubeletRestart},
			{"DaemonSetRestartAndHelmUpgrade", testDaemonSetRestartAndHelmUpgrade},
			{"Memlock", testMemlock},
			{"MultiPoolPod", testMultiPoolPod},
			{"NodeState", testNodeState},
			{"ParallelPods", testParallelPods},
			{"Prometheus", testPrometheusScrape},
		},
	}
}

// devicePluginValues are the device-plugin phase's chart values (beside nodeValues) and what
// its tests expect of them.
func (l localNodeDesc) devicePluginValues() (values, func(c *config)) {
	const slots = 8
	mlIB, mlOthers, memlock := l.memlockLimits()
	withMemlock := func(p values) values {
		if mlOthers != "" {
			p["memlock"] = mlOthers
		}
		return p
	}
	pools := []values{
		{"name": "ib", "mode": "exclusive", "memlock": mlIB, "selectors": values{"linkLayers": []string{"InfiniBand"}}},
		withMemlock(values{"name": "vf", "mode": "exclusive", "nccl": false,
			"selectors": values{"kinds": []string{"VF"}, "linkLayers": []string{"Ethernet"}}}),
		withMemlock(values{"name": "roce-shared", "mode": "shared", "slots": slots, "nccl": false,
			"selectors": values{"kinds": []string{"PF"}, "linkLayers": []string{"Ethernet"}}}),
	}
	v := values{
		"config": values{"pools": pools},
		"nri":    values{"enabled": true, "socket": l.nodeRun + "/nri/nri.sock"},
		"cni": values{
			"install": true,
			"mode":    "chained",
			// This kernel has no RDMA netlink: say the mode instead of asking it.
			"pluginConfig": values{"rdmaNetnsMode": "shared", "stateDir": l.cniState, "logFile": l.cniLog()},
			"chained": values{"pool": "vf", "ipam": values{"type": "host-local",
				"ranges": [][]values{{{"subnet": "192.168.77.0/24"}}}, "dataDir": l.rdmaIPAM}},
		},
	}
	return v, func(c *config) {
		c.pools = []pool{{"ib", "exclusive", int64(len(l.fix.ib))}, {"vf", "exclusive", int64(len(l.fix.vfs))},
			{"roce-shared", "shared", int64(slots * len(l.fix.pfs))}}
		l.common(c)
		c.chainedPool, c.ncclPools, c.memlock = "vf", []string{"ib"}, memlock
	}
}

// railsPhase: one pool per rail, each setting NCCL's variables (the layout users of one
// resource per NIC bring): rail0 and rail1 the HCAs, rail2 the RoCE PF, rail3 the RoCE VFs,
// NRI on, no CNI. A container's NCCL_IB_HCA and UCX_NET_DEVICES name every device it holds
// whatever pools they came from: the NRI plugin sets them after the kubelet's merge, which
// keeps one pool's values (testRailPools). Last: its resources stay in the node's allocatable
// at 0 once the chart is gone.
func (l localNodeDesc) railsPhase() phase {
	_, mlOthers, _ := l.memlockLimits()
	rail := func(name string, sel values) values {
		p := values{"name": name, "mode": "exclusive", "selectors": sel}
		if mlOthers != "" {
			p["memlock"] = mlOthers
		}
		return p
	}
	pools := []values{
		rail("rail0", values{"rdmaDevices": []string{l.fix.ib[0]}}),
		rail("rail1", values{"rdmaDevices": []string{l.fix.ib[1]}}),
		rail("rail2", values{"rdmaDevices": []string{l.fix.pfs[0]}}),
		// Exclusive pools must differ in one selector field: every rail by its devices' names.
		rail("rail3", values{"rdmaDevices": l.fix.vfs}),
	}
	v := values{
		"config": values{"pools": pools},
		"nri":    values{"enabled": true, "socket": l.nodeRun + "/nri/nri.sock"},
	}
	return phase{
		name: "rails",
		config: func(c *config) {
			l.common(c)
			c.pools = []pool{{"rail0", "exclusive", 1}, {"rail1", "exclusive", 1}, {"rail2", "exclusive", 1},
				{"rail3", "exclusive", int64(len(l.fix.vfs))}}
			c.ncclPools = nil // every pool
		},
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v},
			report: "rails: chart installed with one NCCL pool per rail (rail0-rail3) and NRI, DaemonSet ready: %s s"}},
		tests: []namedTest{{"RailPools", testRailPools}},
	}
}

// defaultsPhase: the chart's default pools (ib: every HCA; roce-shared: every Ethernet device,
// the PF and its VFs, as one set of 64 slots), nothing but the node's paths set. With port 1
// of the PF down the shared pool keeps serving its slots (testDefaultsPortDown).
func (l localNodeDesc) defaultsPhase() phase {
	return phase{
		name: "defaults",
		config: func(c *config) {
			l.common(c)
			c.pools = []pool{{"ib", "exclusive", int64(len(l.fix.ib))}, {"roce-shared", "shared", 64}}
			c.ncclPools = []string{"ib"}
			c.portDevice = l.fix.pfs[0]
		},
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues()},
			report: "defaults: chart installed with its default pools, DaemonSet ready: %s s"}},
		tests: []namedTest{{"Allocatable", testAllocatable}, {"SharedPoolPortDown", testDefaultsPortDown}},
	}
}

// upgradePhase: the previous release (e2e/previous-release, built by the harness) installed
// with the device-plugin phase's values and its own image, then upgraded to the working
// tree's chart and image, rolled back and upgraded again, pods of every pool created all
// along (testUpgradeUnderLoad).
func (l localNodeDesc) upgradePhase() phase {
	v, cfg := l.devicePluginValues()
	return l.upgradeOf(phase{name: "upgrade", config: cfg}, v, "the device-plugin phase's values", 20, "")
}

// upgradeGPUAlignedPhase: upgradePhase with the gpu-aligned phase's values, the previous
// release's fakerdma image and fakegpu: a watched pod holds one GPU and the NIC on its
// switch; the pods created during each rollout ask for the other GPU and a NIC, and exit once
// they logged what they got (the pool has a NIC per GPU, so they take the free pair in
// turn): 10 per rollout, not 20, so that each rollout's pods have run within podStartup.
func (l localNodeDesc) upgradeGPUAlignedPhase() phase {
	v, cfg, setup := l.gpuAlignedValues()
	p := phase{name: "upgrade-gpu-aligned", config: cfg, setup: setup}
	skip := ""
	if !l.prevFakeRDMA {
		skip = "hook describe names no prev-fakerdma-image: the previous release's fakerdma image " +
			"(e2e/local-node/prev.sh keeps it, up.sh imports it) is what a gpuAligned pool needs on this kernel"
	}
	return l.upgradeOf(p, v, "the gpu-aligned phase's values (fakerdma image)", 10, skip)
}

// upgradeDRAPhase: upgradePhase with the dra phase's values beside fakegpudra: watched pods
// of vf-dp (the device plugin) and a claim of ib-dra and of vf-dra each; the pods created
// during each rollout: one ib-dra claim, the rest vf-dp pods and vf-dra claims in turn.
func (l localNodeDesc) upgradeDRAPhase() phase {
	v, cfg, setup := l.draValues()
	p := phase{name: "upgrade-dra", config: cfg, setup: setup, after: func(t *testing.T, e *env) { e.waitNoDRASlices(t) }}
	return l.upgradeOf(p, v, "the dra phase's values", 20, "")
}

// upgradeOf makes p an upgrade phase: the previous release installed with the phase's values
// v (beside prevNodeValues; its own image, with -fakerdma when v names the fakerdma tag),
// testUpgradeUnderLoad upgrading to the working tree's with pods created during each rollout.
// skip: why it cannot run though the previous release is there.
func (l localNodeDesc) upgradeOf(p phase, v values, what string, pods int, skip string) phase {
	if l.prevChart == "" {
		p.skip = "hook describe names no previous release (prev-release, prev-chart, prev-image): " +
			"e2e/local-node/prev.sh builds the commit e2e/previous-release names, up.sh imports its image"
		return p
	}
	if skip != "" {
		p.skip = skip
		return p
	}
	tag := l.prevImageTag
	if img, ok := v["image"].(values); ok && img["tag"] == l.imageTag+"-fakerdma" {
		tag += "-fakerdma"
	}
	prevImage := values{"image": values{"repository": l.prevImageRepo, "tag": tag}}
	cfg := p.config
	p.config = func(c *config) {
		cfg(c)
		c.upgradeTo = &upgradeConfig{phase: p.name, prevRelease: l.prevRelease, values: []values{l.nodeValues(), v}, pods: pods}
	}
	p.releases = []release{{name: "kube-rdma", chart: l.prevChart, values: []values{l.prevNodeValues(), v, prevImage},
		report: p.name + ": previous release " + l.prevRelease[:min(12, len(l.prevRelease))] + " (" + tag +
			") installed with " + what + ", DaemonSet ready: %s s"}}
	p.tests = []namedTest{{"UpgradeUnderLoad", testUpgradeUnderLoad}}
	return p
}

// faultsPhase: the device-plugin phase's values, then one fault after another
// (faultcases_test.go), each followed by the one invariant check (fault.check): a torn
// attachment record, a torn node pools file (poolsfault_test.go), a chained pod's NIC removed
// while it ran and one re-probed while it ran (nicfault_test.go), a pod whose DEL never came
// (reclaimfault_test.go), a newer release's record rewritten (recordskew_test.go), a pod without its netdev
// refused by the netdev hook while the NRI plugin is stalled (failclosed_test.go), a record of a previous
// boot, a 0.3.1 primary conflist, RDMA netlink down under a 1.1.0 primary conflist (statusfault_test.go), the daemon killed during ADDs, the kubelet restarted during pod starts, the API server down 60 s.
// Its tests reach the node's files directly (they run on its host): local-node only.
func (l localNodeDesc) faultsPhase() phase {
	v, cfg := l.devicePluginValues()
	return phase{
		name: "faults",
		config: func(c *config) {
			cfg(c)
			c.faults = &faultsConfig{phase: "faults", cniState: l.cniState, rdmaIPAM: l.rdmaIPAM, kubeletRoot: l.nodeRun + "/kubelet",
				conflist: l.nodeRun + "/cni/net.d/10-e2e.conflist", cniBin: l.nodeRun + "/cni/bin/kube-rdma",
				cniE2EBinary: l.cniE2EBinary,
				// The chart's devicePlugin.allocDir default (the phase's values keep it).
				poolsFile: "/var/run/kube-rdma/alloc/_pools.json"}
		},
		// The memlock hook on even where this machine cannot raise a limit: every pool's memlock
		// is at or below containerd's here (memlockLimits), so it raises nothing, and the chained
		// pool's devices carry the netdev hook that NRIStalledFailClosed needs.
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v, {"devicePlugin": values{"memlockHookDir": l.nodeRun + "/hooks"}}},
			report: "faults: chart installed with the device-plugin phase's values and the memlock hook, DaemonSet ready: %s s"}},
		tests: []namedTest{
			{"CNIKilledMidAdd", testFaultCNIKilled},
			{"TornRecord", testFaultTornRecord},
			{"TornPoolsFile", testFaultTornPoolsFile},
			{"NICRemoved", testFaultNICRemoved},
			{"NICReprobed", testFaultNICReprobed},
			{"DELNeverCame", testFaultDELNeverCame},
			{"NewerRecord", testFaultNewerRecord},
			{"NRIStalledFailClosed", testFaultNRIStalledFailClosed},
			{"PreviousBoot", testFaultPreviousBoot},
			{"Conflist031", testFaultConflist031},
			{"RDMANetlinkDown", testFaultRDMANetlinkDown},
			{"DaemonKilled", testFaultDaemonKilled},
			{"KubeletRestart", testFaultKubeletRestart},
			{"APIServerDown", testFaultAPIServerDown},
		},
	}
}

// faultsDRAPhase: the dra phase's values beside fakegpudra, then the DRA front end's faults
// (drafaults_test.go), each followed by fault.check: the daemon killed during Prepares, a
// torn claim record, the daemon killed during Unprepares. Its claim pods ask for one NIC of
// vf-dra; the claim records are in the chart's DRA plugin dir
// (hostPaths.kubeletDir/plugins/rdma.kube-rdma.io), then claims/.
func (l localNodeDesc) faultsDRAPhase() phase {
	v, cfg, setup := l.draValues()
	// The NRI plugin on, and a memlock on every dra pool (testDRAMemlock): below the runtime's
	// hard limit where it cannot raise one (memlockLimits), or every claim pod would fail.
	v["nri"] = values{"enabled": true, "socket": l.nodeRun + "/nri/nri.sock"}
	memlock, bytes := "256Mi", "268435456"
	if !l.memlockRaisable {
		memlock, bytes = "5Mi", "5242880"
	}
	for _, p := range v["config"].(values)["pools"].([]values) {
		if p["frontend"] == "dra" {
			p["memlock"] = memlock
		}
	}
	return phase{
		name: "faults-dra",
		config: func(c *config) {
			cfg(c)
			c.faults = &faultsConfig{phase: "faults-dra", rdmaIPAM: l.rdmaIPAM,
				claims: l.nodeRun + "/kubelet/plugins/" + draDriver + "/claims", claimPool: "vf-dra",
				draMemlock: bytes}
		},
		setup: setup,
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v},
			report: "faults-dra: chart installed with the dra phase's values, DaemonSet ready: %s s"}},
		tests: []namedTest{
			{"DaemonKilledDuringPrepare", testFaultDaemonKilledDuringPrepare},
			{"TornClaimRecord", testFaultTornClaimRecord},
			{"DaemonKilledDuringUnprepare", testFaultDaemonKilledDuringUnprepare},
			{"DRAMemlock", testDRAMemlock},
		},
		after: func(t *testing.T, e *env) { e.waitNoDRASlices(t) },
	}
}

// gpuAlignedPhase: the InfiniBand pool gets binding gpuAligned. Such a pool needs the
// exclusive RDMA netns mode, which this kernel (no RDMA netlink) can neither report nor
// provide, so this phase installs the image built with the tag kuberdma_e2e, whose binaries
// fake RDMA netlink (internal/fakerdma: a state file of which netns each RDMA device is in);
// the netdev moves, the kubelet, PodResources and containerd are real. fakegpu (hook start
// fakegpu) stands in for NVIDIA's GPU device plugin: the fixture's GPUs as nvidia.com/gpu,
// by UUID.
func (l localNodeDesc) gpuAlignedPhase() phase {
	v, cfg, setup := l.gpuAlignedValues()
	return phase{
		name: "gpu-aligned",
		config: func(c *config) {
			cfg(c)
			// The torn pool file's fault (testFaultTornPoolFile) ends with fault.check.
			c.faults = &faultsConfig{phase: "gpu-aligned", cniState: l.cniState, rdmaIPAM: l.rdmaIPAM,
				allocDir: l.nodeRun + "/alloc"}
		},
		setup:    setup,
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v}}},
		tests:    []namedTest{{"GPUAligned", testGPUAligned}, {"TornPoolFile", testFaultTornPoolFile}},
	}
}

// gpuAlignedValues are the gpu-aligned phase's chart values (beside nodeValues), what its
// tests expect of them and its setup (fakegpu).
func (l localNodeDesc) gpuAlignedValues() (values, func(c *config), func(t *testing.T, e *env)) {
	v := values{
		"image": values{"tag": l.imageTag + "-fakerdma"},
		"config": values{"pools": []values{{"name": "ib", "mode": "exclusive", "binding": "gpuAligned",
			"selectors": values{"linkLayers": []string{"InfiniBand"}}}}},
		"devicePlugin": values{"allocDir": l.nodeRun + "/alloc"},
		"cni": values{
			"install": true,
			"mode":    "chained",
			"pluginConfig": values{"rdmaNetnsMode": "exclusive", "procRoot": l.fixture + "/proc",
				"stateDir": l.cniState, "logFile": l.cniLog()},
			"chained": values{"pool": "ib"},
		},
	}
	cfg := func(c *config) {
		l.common(c)
		c.pools, c.ncclPools = []pool{{"ib", "exclusive", int64(len(l.fix.ib))}}, []string{"ib"}
		c.gpuAligned = &gpuAlignedConfig{pool: "ib", nics: l.fix.gpuNICs, resource: "nvidia.com/gpu",
			fakeRDMAState: fakerdma.DefaultStateFile}
	}
	setup := func(t *testing.T, e *env) {
		e.mustHook(t, 3*time.Minute, "start", "fakegpu")
	}
	return v, cfg, setup
}

// draPhase: the pools served as a DRA driver beside fakegpudra, a stand-in GPU DRA driver
// publishing the fixture's GPUs with pcieRoot, pciBusID and kube-rdma.io/pcieSwitch.
// ib-dra (frontend dra, the HCAs, one under each GPU's switch), vf-dra (frontend dra, the
// first half of the RoCE VFs, all on GPU0's switch) and vf-dp (the device plugin, the other
// half); no CNI, no NRI: a claim's container and a device plugin pod's get the same kind of
// thing (CDI device nodes and NCCL environment), so their start latencies compare. The dra
// pools are not named ib and vf: the earlier phases' device plugin advertised
// rdma.kube-rdma.io/ib and /vf, which the kubelet keeps in the node's allocatable at 0 once
// their plugin is gone, and the scheduler gives an extended resource the node lists to the
// device plugin, not to a DeviceClass's extendedResourceName. ib-dra is NCCL's fabric: the
// VF pools set no NCCL_* (two NCCL pools with devices on the node would be reported).
func (l localNodeDesc) draPhase() phase {
	v, cfg, setup := l.draValues()
	return phase{
		name:   "dra",
		config: cfg,
		setup:  setup,
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v},
			report: "dra: chart installed with dra.enabled (pools ib-dra and vf-dra frontend dra, vf-dp device plugin), DaemonSet ready: %s s"}},
		tests: []namedTest{
			{"DRAClaimTemplate", testDRAClaimTemplate},
			{"DRAAlignPCIeRoot", testDRAAlignPCIeRoot},
			{"DRAAlignPCIeSwitch", testDRAAlignPCIeSwitch},
			{"DRAPrioritized", testDRAPrioritized},
			{"DRAPortDownTaint", testDRAPortDownTaint},
			{"DRAExtendedResource", testDRAExtendedResource},
			{"DRAStartLatency", testDRAStartLatency},
		},
		after: func(t *testing.T, e *env) { e.waitNoDRASlices(t) },
	}
}

// draSharedPhase: one NIC (the RoCE PF) in roce-shared-dra, a shared pool of frontend dra
// with 3 slots: the DRA front end publishes it for 3 claims at once through consumable
// capacity (the node's components run with DRAConsumableCapacity, up.sh). The CNI plugin is
// chained to the DRA claims with sharedNetdev macvlan: each claim's pod gets a macvlan child
// of the PF's netdev (a veth here) as net1, with an address of sharedSubnet, and the daemon
// writes it into the claim's status.
func (l localNodeDesc) draSharedPhase() phase {
	const pool, slots, subnet = "roce-shared-dra", 3, "192.168.78."
	v := values{
		"config": values{"pools": []values{
			{"name": pool, "mode": "shared", "slots": slots, "frontend": "dra", "nccl": false,
				"selectors": values{"kinds": []string{"PF"}, "linkLayers": []string{"Ethernet"}, "rdmaDevices": []string{l.fix.pfs[0]}}},
		}},
		"dra": values{"enabled": true},
		"cni": values{
			"install": true,
			"mode":    "chained",
			// This kernel has no RDMA netlink: say the mode instead of asking it.
			"pluginConfig": values{"rdmaNetnsMode": "shared", "stateDir": l.cniState, "logFile": l.cniLog(), "sharedNetdev": "macvlan"},
			"chained": values{"pool": pool, "ipam": values{"type": "host-local",
				"ranges": [][]values{{{"subnet": subnet + "0/24"}}}, "dataDir": l.rdmaIPAM}},
		},
	}
	return phase{
		name: "dra-shared",
		config: func(c *config) {
			l.common(c)
			c.pools, c.ncclPools = nil, []string{} // nccl: false: no pool sets them
			c.dra = &draConfig{pools: map[string]int{pool: 1}, sharedPool: pool, sharedSlots: slots, sharedSubnet: subnet}
		},
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v},
			report: "dra-shared: chart installed with dra.enabled (pool roce-shared-dra: shared, frontend dra, 3 slots, the RoCE PF) and the CNI chained to its claims (sharedNetdev macvlan), DaemonSet ready: %s s"}},
		tests: []namedTest{{"DRASharedNIC", testDRASharedNIC}},
		after: func(t *testing.T, e *env) { e.waitNoDRASlices(t) },
	}
}

// draValues are the dra phase's chart values (beside nodeValues), what its tests expect of
// them and its setup (fakegpudra and its DeviceClass).
func (l localNodeDesc) draValues() (values, func(c *config), func(t *testing.T, e *env)) {
	half := len(l.fix.vfs) / 2
	vfDRA, vfDP := l.fix.vfs[:half], l.fix.vfs[half:]
	vfSel := func(devs []string) values {
		return values{"linkLayers": []string{"Ethernet"}, "kinds": []string{"VF"}, "rdmaDevices": devs}
	}
	v := values{
		"config": values{"pools": []values{
			{"name": "ib-dra", "mode": "exclusive", "frontend": "dra", "selectors": values{"linkLayers": []string{"InfiniBand"}}},
			{"name": "vf-dra", "mode": "exclusive", "frontend": "dra", "nccl": false, "selectors": vfSel(vfDRA)},
			{"name": "vf-dp", "mode": "exclusive", "nccl": false, "selectors": vfSel(vfDP)},
		}},
		"dra": values{"enabled": true},
	}
	cfg := func(c *config) {
		l.common(c)
		c.pools, c.ncclPools = []pool{{"vf-dp", "exclusive", int64(len(vfDP))}}, []string{"ib-dra"}
		c.dra = &draConfig{pools: map[string]int{"ib-dra": len(l.fix.ib), "vf-dra": len(vfDRA)},
			alignPool: "ib-dra", latencyPool: "vf-dra", latencyPods: 5,
			gpuDriver: l.gpuDRADriver, gpuClass: l.gpuDRADriver,
			// The device a claim for any HCA of ib-dra gets first (device names sort by PCI
			// address), so a claim that still gets it while it is tainted shows.
			portDevice: l.fix.ib[0]}
	}
	setup := func(t *testing.T, e *env) {
		e.mustHook(t, 3*time.Minute, "start", "fakegpudra")
		dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: l.gpuDRADriver},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", l.gpuDRADriver)}}}}}
		if _, err := e.draAPI.DeviceClasses().Create(t.Context(), dc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create DeviceClass %s: %v", l.gpuDRADriver, err)
		}
	}
	return v, cfg, setup
}

// waitNoDRASlices waits until no ResourceSlice of the driver is left: the kubelet deletes the
// slices of a driver that unregistered (after a grace period).
func (e *env) waitNoDRASlices(t *testing.T) {
	start := time.Now()
	err := eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		list, err := e.draAPI.ResourceSlices().List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("spec.driver", draDriver).String()})
		if err != nil {
			return err
		}
		if n := len(list.Items); n > 0 {
			return fmt.Errorf("%d ResourceSlices of %s left after helm uninstall", n, draDriver)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.appendReport(t, fmt.Sprintf("%s: no ResourceSlice of %s left %d s after the chart's uninstall", path.Base(t.Name()), draDriver,
		int(time.Since(start).Seconds())))
}

// setup reports the memlock limits the pools get on this machine and checks the chart's
// output against the API server.
func (l localNodeDesc) setup(t *testing.T, e *env) {
	if !l.memlockRaisable {
		e.appendReport(t, fmt.Sprintf("memlock: this machine's root cannot raise RLIMIT_MEMLOCK (no CAP_SYS_RESOURCE): pools at 4Mi and 6Mi, below containerd's %s KiB", l.memlockHardKiB))
	}
	e.chartDryRun(t, l.nadCRD)
}

// TestFixtureOf: the answer key read from nodesim.LocalNode matches the tree up.sh writes:
// each GPU's UUID as its procfs information file gives it, the HCA on the GPU's switch by
// its PCI path in sysfs.
func TestFixtureOf(t *testing.T) {
	topo := nodesim.LocalNode(4)
	tree, err := nodesim.Build(t.TempDir(), topo)
	if err != nil {
		t.Fatal(err)
	}
	got, err := fixtureOf(topo)
	if err != nil {
		t.Fatal(err)
	}
	uuid := func(bus string) string {
		b, err := os.ReadFile(filepath.Join(tree.ProcRoot, "driver/nvidia/gpus", bus, "information"))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^GPU UUID:\s*(\S+)`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no GPU UUID in %s's information", bus)
		}
		return string(m[1])
	}
	want := fixtureNode{
		ib:  []string{"mlx5_0", "mlx5_1"},
		pfs: []string{"mlx5_2"},
		vfs: []string{"mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6"},
		gpuNICs: map[string]gpuNIC{
			uuid("0000:19:00.0"): {rdma: "mlx5_0", netdev: "ibp24s0"},
			uuid("0000:9b:00.0"): {rdma: "mlx5_1", netdev: "ibp154s0"},
		},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(fixtureNode{}, gpuNIC{})); diff != "" {
		t.Errorf("fixtureOf (-want +got):\n%s", diff)
	}
	// The HCA each GPU gets shares its PCIe switch in sysfs.
	for _, bus := range []string{"0000:19:00.0", "0000:9b:00.0"} {
		gpu, err := filepath.EvalSymlinks(filepath.Join(tree.SysRoot, "bus/pci/devices", bus))
		if err != nil {
			t.Fatal(err)
		}
		dev, err := filepath.EvalSymlinks(filepath.Join(tree.SysRoot, "class/infiniband", got.gpuNICs[uuid(bus)].rdma))
		if err != nil {
			t.Fatal(err)
		}
		nic := filepath.Dir(filepath.Dir(dev)) // <pci function>/infiniband/<device>
		if sw := filepath.Dir(filepath.Dir(gpu)); sw != filepath.Dir(filepath.Dir(nic)) {
			t.Errorf("GPU %s (%s) and its HCA (%s) are not under one switch", bus, gpu, nic)
		}
	}
}

// TestLocalNodeHarness: hook describe's text gives the eight phases in order, the device
// plugin phase's pools counted from the fixture; the upgrade phases skip without the
// previous release (upgrade-gpu-aligned also without its fakerdma image) and install its
// chart with its image otherwise; a description without a key is refused.
func TestLocalNodeHarness(t *testing.T) {
	desc := `harness local-node
node kube-rdma-e2e
image localhost/kube-rdma:e2e
test-image localhost/rdma-test:e2e
node-run /n
fixture /n/fixture
fixture-vfs 6
api-port 36443
metrics-port 39478
cni-state-dir /n/cni/kube-rdma
rdma-ipam-dir /n/cni/ipam-rdma
nad-crd /r/nad-crd.yaml
gpu-dra-driver gpu.e2e.kube-rdma.io
memlock-raisable no
memlock-hard-kib 8192
`
	h, err := localNode(parseDescription(desc))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range h.phases {
		names = append(names, p.name)
	}
	if diff := cmp.Diff([]string{"device-plugin", "gpu-aligned", "dra", "upgrade", "upgrade-gpu-aligned", "upgrade-dra", "faults", "faults-dra", "dra-shared", "multus", "rails", "defaults"}, names); diff != "" {
		t.Errorf("phases (-want +got):\n%s", diff)
	}
	// multus: skipped without the Multus chart and image; with them, the chart in multus mode
	// with one NAD of the exclusive vf pool, and no chained pool.
	if m := h.phases[9]; m.skip == "" {
		t.Errorf("multus phase without multus-chart: no skip reason")
	}
	if hm, err := localNode(parseDescription(desc + "multus-chart /r/multus\nmultus-image localhost/multus:e2e\n")); err != nil {
		t.Error(err)
	} else {
		m := hm.phases[9]
		c := config{}
		m.config(&c)
		cni := m.releases[0].values[1]["cni"].(values)
		nets := cni["networks"].([]values)
		if m.skip != "" || cni["mode"] != "multus" || len(nets) != 1 || nets[0]["pool"] != "vf" || c.chainedPool != "" {
			t.Errorf("multus phase: skip %q, cni %v, chained pool %q; want multus mode, one NAD of vf, no chained pool", m.skip, cni, c.chainedPool)
		}
	}
	var c config
	h.phases[0].config(&c)
	want := []pool{{"ib", "exclusive", 2}, {"vf", "exclusive", 6}, {"roce-shared", "shared", 8}}
	if diff := cmp.Diff(want, c.pools, cmp.AllowUnexported(pool{})); diff != "" {
		t.Errorf("device-plugin pools (-want +got):\n%s", diff)
	}
	// Every phase's pools load as the daemon loads them (it exits on a config it refuses).
	for _, p := range h.phases {
		for _, r := range p.releases {
			cfg := values{"resourcePrefix": "rdma.kube-rdma.io"}
			for _, v := range r.values {
				if c, ok := v["config"].(values); ok && c["pools"] != nil {
					cfg["pools"] = c["pools"]
				}
			}
			if cfg["pools"] == nil {
				continue // the chart's default pools (deploy/helm's tests load them)
			}
			b, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := agentconfig.Parse(b); err != nil {
				t.Errorf("phase %s: its pools do not load: %v", p.name, err)
			}
		}
	}
	// rails: one pool per rail, each its own devices, every pool NCCL's, NRI on.
	c = config{}
	h.phases[10].config(&c)
	want = []pool{{"rail0", "exclusive", 1}, {"rail1", "exclusive", 1}, {"rail2", "exclusive", 1}, {"rail3", "exclusive", 6}}
	if diff := cmp.Diff(want, c.pools, cmp.AllowUnexported(pool{})); diff != "" || c.ncclPools != nil {
		t.Errorf("rails pools (-want +got):\n%s\nNCCL pools %v, want every pool", diff, c.ncclPools)
	}
	rv := h.phases[10].releases[0].values[1]
	if rv["nri"].(values)["enabled"] != true || len(rv["config"].(values)["pools"].([]values)) != 4 {
		t.Errorf("rails values %v: want NRI on and four pools", rv)
	}
	// faults-dra: its claim records where the chart's --dra-plugin-dir puts them (kubeletDir
	// /plugins/<driver>/claims), its claim pool one of the phase's dra pools.
	c = config{}
	h.phases[7].config(&c)
	if c.faults == nil || c.faults.claims != "/n/kubelet/plugins/rdma.kube-rdma.io/claims" || c.dra == nil || c.dra.pools[c.faults.claimPool] == 0 {
		t.Errorf("faults-dra config: faults %+v, dra %+v; want the claims dir under /n/kubelet and a dra pool", c.faults, c.dra)
	}
	if kd := h.phases[7].releases[0].values[0]["hostPaths"].(values)["kubeletDir"]; kd != "/n/kubelet" {
		t.Errorf("faults-dra: hostPaths.kubeletDir %v, want /n/kubelet", kd)
	}
	for _, p := range h.phases[3:6] { // the upgrade phases
		if p.skip == "" || p.releases != nil {
			t.Errorf("phase %s without prev-*: skip %q, %d releases; want a reason and none", p.name, p.skip, len(p.releases))
		}
	}
	withPrev := desc + "prev-release 7593f5d529e96b70546fc3d98e09c4606edda510\nprev-chart /c/prev/chart\nprev-image localhost/kube-rdma:prev-7593f5d529e9\n"
	h, err = localNode(parseDescription(withPrev))
	if err != nil {
		t.Fatal(err)
	}
	up := h.phases[3]
	if up.skip != "" || len(up.releases) != 1 || up.releases[0].chart != "/c/prev/chart" {
		t.Fatalf("upgrade phase with prev-*: skip %q, releases %+v; want the previous chart installed", up.skip, up.releases)
	}
	if got := up.releases[0].values[2]["image"]; !cmp.Equal(got, values{"repository": "localhost/kube-rdma", "tag": "prev-7593f5d529e9"}) {
		t.Errorf("upgrade phase: the previous release's image values %v", got)
	}
	c = config{}
	up.config(&c)
	if c.upgradeTo == nil || len(c.upgradeTo.values) != 2 || c.chainedPool != "vf" {
		t.Errorf("upgrade phase config: upgradeTo %+v, chained pool %q; want the working tree's values and vf", c.upgradeTo, c.chainedPool)
	}
	if ga := h.phases[4]; ga.skip == "" || ga.releases != nil {
		t.Errorf("upgrade-gpu-aligned without prev-fakerdma-image: skip %q, %d releases; want a reason and none", ga.skip, len(ga.releases))
	}
	dra := h.phases[5]
	if dra.skip != "" || len(dra.releases) != 1 || dra.releases[0].values[2]["image"].(values)["tag"] != "prev-7593f5d529e9" {
		t.Errorf("upgrade-dra with prev-*: skip %q, releases %+v; want the previous chart with its image", dra.skip, dra.releases)
	}
	c = config{}
	dra.config(&c)
	if c.upgradeTo == nil || c.upgradeTo.phase != "upgrade-dra" || c.upgradeTo.pods != 20 || c.dra == nil || len(c.upgradeTo.values) != 2 {
		t.Errorf("upgrade-dra config: upgradeTo %+v, dra %+v; want 20 pods, the working tree's values and the DRA pools", c.upgradeTo, c.dra)
	}
	h, err = localNode(parseDescription(withPrev + "prev-fakerdma-image localhost/kube-rdma:prev-7593f5d529e9-fakerdma\n"))
	if err != nil {
		t.Fatal(err)
	}
	ga := h.phases[4]
	if ga.skip != "" || len(ga.releases) != 1 {
		t.Fatalf("upgrade-gpu-aligned with prev-fakerdma-image: skip %q, releases %+v; want the previous chart installed", ga.skip, ga.releases)
	}
	if got := ga.releases[0].values[2]["image"]; !cmp.Equal(got, values{"repository": "localhost/kube-rdma", "tag": "prev-7593f5d529e9-fakerdma"}) {
		t.Errorf("upgrade-gpu-aligned: the previous release's image values %v; want its fakerdma image", got)
	}
	c = config{}
	ga.config(&c)
	if c.upgradeTo == nil || c.gpuAligned == nil || c.upgradeTo.values[1]["image"].(values)["tag"] != "e2e-fakerdma" {
		t.Errorf("upgrade-gpu-aligned config: upgradeTo %+v, gpuAligned %+v; want the working tree's fakerdma image", c.upgradeTo, c.gpuAligned)
	}
	if _, err := localNode(parseDescription(withPrev + "prev-fakerdma-image localhost/kube-rdma:other\n")); err == nil {
		t.Error("prev-fakerdma-image not prev-image's -fakerdma: no error")
	}
	if _, err := localNode(parseDescription(desc + "prev-chart /c/prev/chart\n")); err == nil {
		t.Error("prev-chart without prev-release and prev-image: no error")
	}
	for _, key := range []string{"node-run", "image", "fixture-vfs", "gpu-dra-driver"} {
		d := parseDescription(desc)
		delete(d, key)
		if _, err := localNode(d); err == nil {
			t.Errorf("description without %s: no error", key)
		}
	}
}
