package helm

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestDefaults checks the default install: the device plugin only, no capabilities, and the
// host paths it needs and no others. Its API access (nodeState) is TestNodeStateRBAC's.
func TestDefaults(t *testing.T) {
	objs := render(t)
	if diff := cmp.Diff([]string{"ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}, kinds(objs)); diff != "" {
		t.Errorf("rendered kinds (-want +got):\n%s", diff)
	}
	for _, o := range objs {
		for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
			"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "helm.sh/chart"} {
			if o.Metadata.Labels[l] == "" {
				t.Errorf("%s %s: no label %s", o.Kind, o.Metadata.Name, l)
			}
		}
		if clusterScoped := strings.HasPrefix(o.Kind, "ClusterRole") || strings.HasPrefix(o.Kind, "ValidatingAdmissionPolicy"); o.Metadata.Namespace != "kube-rdma" && !clusterScoped {
			t.Errorf("%s %s: namespace %q, want the release's", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}

	c, err := config.Parse([]byte(find(t, objs, "ConfigMap").Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the rendered pools do not load: %v", err)
	}
	var names []string
	for _, p := range c.Pools {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"ib", "roce-shared"}, names); diff != "" {
		t.Errorf("pools (-want +got):\n%s", diff)
	}

	ds := daemonSet(t, objs)
	spec := ds.Template.Spec
	if !spec.HostNetwork || spec.HostPID {
		t.Errorf("hostNetwork %v hostPID %v, want the host network namespace only", spec.HostNetwork, spec.HostPID)
	}
	if diff := cmp.Diff([]string{"device-plugin"}, containerNames(spec.Containers)); diff != "" || len(spec.InitContainers) != 0 {
		t.Errorf("containers (-want +got):\n%s init containers %v", diff, containerNames(spec.InitContainers))
	}
	want := map[string]bool{"/var/lib/kubelet/device-plugins": false, "/var/run/cdi": false, "/var/lib/kube-rdma/hooks": false, "/dev": true,
		"/var/lib/kubelet/pod-resources": true}
	if diff := cmp.Diff(want, hostPaths(ds)); diff != "" {
		t.Errorf("host paths, true = read-only (-want +got):\n%s", diff)
	}
	checkUnprivileged(t, spec.Containers)
	args := spec.Containers[0].Args
	for _, a := range []string{"--config=/etc/kube-rdma/config.yaml", "--kubelet-dir=/var/lib/kubelet/device-plugins",
		"--sysfs-root=/sys", "--dev-root=/host/dev", "--cdi-dir=/var/run/cdi", "--memlock-hook-dir=/var/lib/kube-rdma/hooks", "--metrics-addr=127.0.0.1:9478",
		"--cni-state-dir=" /* no CNI plugin installed: no records to read */, "--cni-mode=not-installed",
		"--alloc-dir=", /* no gpuAligned pool: no alloc dir mounted, the daemon refuses one added by hand */
		"--pools-file=" /* no CNI plugin to read it */} {
		if !slices.Contains(args, a) {
			t.Errorf("device plugin args %q lack %s", args, a)
		}
	}
}

func checkUnprivileged(t *testing.T, cs []container) {
	t.Helper()
	for _, c := range cs {
		sc := c.SecurityContext
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s is privileged", c.Name)
		}
		if len(sc.Capabilities.Add) > 0 || !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
			t.Errorf("%s: capabilities add %v drop %v, want none and ALL", c.Name, sc.Capabilities.Add, sc.Capabilities.Drop)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s allows privilege escalation", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s has a writable root file system", c.Name)
		}
	}
}

// parseEntry parses a plugin entry of a conflist as the runtime hands it to the plugin: with
// the list's cniVersion and name added, and the node file the install-cni container of objs
// writes (cniNode): a host path in the entry other than the node's is refused.
func parseEntry(t *testing.T, objs []object, entry string) *netconf.Conf {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(entry), &m); err != nil {
		t.Fatalf("plugin entry is not JSON: %v\n%s", err, entry)
	}
	if _, ok := m["cniVersion"]; !ok {
		m["cniVersion"] = "1.0.0"
	}
	if _, ok := m["name"]; !ok {
		m["name"] = "primary"
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c, err := netconf.Parse(b, cniNode(t, objs))
	if err != nil {
		t.Fatalf("the CNI plugin rejects the rendered netconf: %v\n%s", err, entry)
	}
	return c
}

// cniNode is the node file that the DaemonSet's install-cni container writes: `kube-rdma
// install` parses its flags into it.
func cniNode(t *testing.T, objs []object) netconf.Node {
	t.Helper()
	for _, c := range daemonSet(t, objs).Template.Spec.InitContainers {
		if c.Name != "install-cni" {
			continue
		}
		n := netconf.Node{Version: netconf.NodeFileVersion}
		for _, a := range c.Args {
			k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			switch k {
			case "state-dir":
				n.StateDir = v
			case "log-file":
				n.LogFile = v
			case "kubelet-socket":
				n.KubeletSocket = v
			case "sysfs-root":
				n.SysfsRoot = v
			case "proc-root":
				n.ProcRoot = v
			case "alloc-dir":
				n.AllocDir = v
			case "dra-claims-dir":
				n.DRAClaimsDir = v
			case "require-pod-resources":
				req := v == "true"
				n.RequirePodResources = &req
			}
		}
		b, err := n.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if n, err = netconf.ParseNode(b); err != nil {
			t.Fatalf("install-cni args %q: %v", c.Args, err)
		}
		return n
	}
	t.Fatal("no install-cni init container")
	return netconf.Node{}
}

func TestChained(t *testing.T) {
	objs := render(t, "--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib",
		"--set", "hostPaths.kubeletDir=/var/lib/k,hostPaths.sysfsRoot=/srv/fixture/sys",
		"--set-json", `cni.pluginConfig={"rdmaNetnsMode":"shared","sharedNetdev":"ipvlan"}`)
	ds := daemonSet(t, objs)
	spec := ds.Template.Spec
	if diff := cmp.Diff([]string{"install-cni"}, containerNames(spec.InitContainers)); diff != "" {
		t.Errorf("init containers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"device-plugin", "cni-chain"}, containerNames(spec.Containers)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	// The daemon's CAP_NET_ADMIN and its read-write state dir are the reclaimer's (TestReclaim).
	checkUnprivileged(t, append(spec.InitContainers, spec.Containers[1:]...))
	want := map[string]bool{"/var/lib/kubelet/device-plugins": false, "/var/run/cdi": false, "/var/lib/kube-rdma/hooks": false, "/dev": true,
		"/srv/fixture/sys": true, "/opt/cni/bin": false, "/etc/cni/net.d": false, "/var/lib/cni/kube-rdma": false,
		"/var/lib/cni/kube-rdma/metrics": false, "/var/lib/k/pod-resources": true, "/var/run/kube-rdma/alloc": false,
		"/var/lib/cni/networks": false, "/var/run/netns": true}
	if diff := cmp.Diff(want, hostPaths(ds)); diff != "" {
		t.Errorf("host paths, true = read-only (-want +got):\n%s", diff)
	}
	// The node's pools file, in the CNI's allocDir (its node file's), for its "deviceID in no
	// pool" refusal; no gpuAligned pool, so no --alloc-dir.
	if n := cniNode(t, objs); !slices.Contains(spec.Containers[0].Args, "--pools-file="+nodepools.Path(n.AllocDir)) ||
		!slices.Contains(spec.Containers[0].Args, "--alloc-dir=") {
		t.Errorf("device plugin args %q: want --pools-file=%s and --alloc-dir=", spec.Containers[0].Args, nodepools.Path(n.AllocDir))
	}
	// The plugin's operations spool, in its node file's stateDir, drained by the daemon.
	if n := cniNode(t, objs); !slices.Contains(spec.Containers[0].Args, "--cni-metrics-dir="+cniops.Dir(n.StateDir)) {
		t.Errorf("device plugin args %q: want --cni-metrics-dir=%s", spec.Containers[0].Args, cniops.Dir(n.StateDir))
	}
	if got := spec.InitContainers[0].Command; !slices.Equal(got, []string{"/usr/local/bin/kube-rdma", "install"}) {
		t.Errorf("install-cni command %q", got)
	}
	if !slices.Contains(spec.Containers[0].Args, "--cni-mode=chained") {
		t.Errorf("device plugin args %q lack --cni-mode=chained", spec.Containers[0].Args)
	}
	// The entry and the binary stay across restarts and upgrades; the uninstall hook takes
	// them out (TestUninstallHook).
	if slices.Contains(spec.Containers[1].Args, "--remove-on-exit") {
		t.Errorf("cni-chain args %q: every restart or upgrade would take the entry out", spec.Containers[1].Args)
	}
	if ds.Template.Metadata.Annotations["kube-rdma.io/cni-plugin-checksum"] == "" {
		t.Error("no checksum annotation: a changed plugin entry would not roll the pods")
	}
	entry := find(t, objs, "ConfigMap").Data["cni-plugin.json"]
	c := parseEntry(t, objs, entry)
	if !c.Standalone() || c.ResourceName != "rdma.kube-rdma.io/ib" || c.KubeletSocket != "/var/lib/k/pod-resources/kubelet.sock" ||
		c.SysfsRoot != "/srv/fixture/sys" || !c.RequirePodResources || c.SharedNetdev != netconf.SharedIPVLAN {
		t.Errorf("plugin entry with the node file: standalone %v, resource %q, kubelet socket %q, sysfs %q, requirePodResources %v, sharedNetdev %q",
			c.Standalone(), c.ResourceName, c.KubeletSocket, c.SysfsRoot, c.RequirePodResources, c.SharedNetdev)
	}
	for _, k := range []string{"kubeletSocket", "sysfsRoot", "procRoot", "allocDir", "logFile", "stateDir"} {
		if strings.Contains(entry, `"`+k+`"`) {
			t.Errorf("plugin entry names %s, a host path (the node file's):\n%s", k, entry)
		}
	}
	if args := spec.Containers[1].Args; !slices.Contains(args, "--kubelet-socket=/var/lib/k/pod-resources/kubelet.sock") ||
		!slices.Contains(args, "--sysfs-root=/srv/fixture/sys") {
		t.Errorf("cni-chain args %q: it rewrites the node file with other paths than install-cni", args)
	}
}

func TestMultus(t *testing.T) {
	objs := render(t, "--set", "cni.install=true,cni.mode=multus",
		"--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib","ipam":{"type":"host-local","ranges":[[{"subnet":"192.168.100.0/24"}]]}}]`)
	nad := find(t, objs, "NetworkAttachmentDefinition")
	if got := nad.Metadata.Annotations["k8s.v1.cni.cncf.io/resourceName"]; got != "rdma.kube-rdma.io/ib" {
		t.Errorf("resourceName annotation %q", got)
	}
	var spec struct {
		Config string `json:"config"`
	}
	if err := json.Unmarshal(nad.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	// Multus adds the device it allocated, as deviceID and pciBusID.
	c := parseEntry(t, objs, strings.Replace(spec.Config, "{", `{"deviceID": "mlx5_0", "pciBusID": "mlx5_0",`, 1))
	if c.Name != "rdma-ib" || c.Standalone() || !c.RequirePodResources {
		t.Errorf("netconf name %q standalone %v requirePodResources %v", c.Name, c.Standalone(), c.RequirePodResources)
	}
	// The chart's default leaves sharedNetdev out, which is none in this release: no shared
	// pool's pod gets a child (an attachment record of schema 2) unless the values opt in.
	if c.SharedNetdev != netconf.SharedNone || strings.Contains(spec.Config, "sharedNetdev") {
		t.Errorf("default sharedNetdev %q, want none and left out of the netconf:\n%s", c.SharedNetdev, spec.Config)
	}
	for _, k := range []string{"kubeletSocket", "sysfsRoot", "procRoot", "allocDir", "logFile", "stateDir"} {
		if strings.Contains(spec.Config, `"`+k+`"`) {
			t.Errorf("NetworkAttachmentDefinition names %s, a host path (the node file's):\n%s", k, spec.Config)
		}
	}
	// The opt-in renders into the NetworkAttachmentDefinition.
	optIn := render(t, "--set", "cni.install=true,cni.mode=multus",
		"--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib"}]`, "--set-json", `cni.pluginConfig={"sharedNetdev":"macvlan"}`)
	if err := json.Unmarshal(find(t, optIn, "NetworkAttachmentDefinition").Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if c := parseEntry(t, optIn, strings.Replace(spec.Config, "{", `{"deviceID": "mlx5_0",`, 1)); c.SharedNetdev != netconf.SharedMacvlan {
		t.Errorf("cni.pluginConfig.sharedNetdev macvlan: netconf's %q", c.SharedNetdev)
	}
	ds := daemonSet(t, objs)
	spec2 := ds.Template.Spec
	if diff := cmp.Diff([]string{"device-plugin"}, containerNames(spec2.Containers)); diff != "" {
		t.Errorf("containers (-want +got):\n%s", diff)
	}
	// The node state reads the plugin's records (the pods' netdev names); the reclaimer removes
	// those it finishes (TestReclaim), so the mount is read-write.
	if ro, ok := hostPaths(ds)["/var/lib/cni/kube-rdma"]; !ok || ro {
		t.Errorf("state dir mounted %v, read-only %v; want read-write", ok, ro)
	}
	if args := spec2.Containers[0].Args; !slices.Contains(args, "--cni-state-dir=/var/lib/cni/kube-rdma") {
		t.Errorf("device plugin args %q lack --cni-state-dir", args)
	}
	// The NPWG device-info files Multus reads: written by the daemon at the host's path.
	const devinfo = "/var/run/k8s.cni.cncf.io/devinfo/dp"
	if ro, ok := hostPaths(ds)[devinfo]; !ok || ro {
		t.Errorf("device-info dir mounted %v, read-only %v; want read-write", ok, ro)
	}
	if args := spec2.Containers[0].Args; !slices.Contains(args, "--device-info-dir="+devinfo) {
		t.Errorf("device plugin args %q lack --device-info-dir", args)
	}
}

// TestRejected: values the chart must refuse rather than render something the daemon or the
// plugin would reject on the node.
func TestRejected(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown value":            {"--set", "devicePlgin.logLevel=debug"},
		"bad mode":                 {"--set", "config.pools[0].mode=partial"},
		"slots on exclusive":       {"--set", "config.pools[0].slots=4"},
		"reserved prefix":          {"--set", "config.resourcePrefix=rdma.kubernetes.io"},
		"bad vendor":               {"--set", "config.pools[0].selectors.vendors[0]=mellanox"},
		"no pools":                 {"--set-json", "config.pools=[]"},
		"chained without pool":     {"--set", "cni.install=true,cni.mode=chained"},
		"chained pool not defined": {"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=nope"},
		"multus without networks":  {"--set", "cni.install=true,cni.mode=multus"},
		"multus pool not defined":  {"--set", "cni.install=true,cni.mode=multus", "--set-json", `cni.networks=[{"name":"x","pool":"nope"}]`},
		"bad mode name":            {"--set", "cni.mode=bridge"},
		"relative kubelet dir":     {"--set", "hostPaths.kubeletDir=var/lib/kubelet"},
		"gpuAligned on shared":     {"--set", "config.pools[1].binding=gpuAligned"},
		"unknown binding":          {"--set", "config.pools[0].binding=numa"},
		"relative alloc dir":       {"--set", "devicePlugin.allocDir=run/alloc"},
		// The plugin refuses a netconf naming another host path than its node file's.
		"chained pluginConfig kubeletSocket": {"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib", "--set-json", `cni.pluginConfig={"kubeletSocket":"/x"}`},
		// A sharedNetdev the plugin would refuse (code 7) at every pod's ADD.
		"pluginConfig sharedNetdev vlan": {"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib", "--set-json", `cni.pluginConfig={"sharedNetdev":"vlan"}`},
		"multus pluginConfig sysfsRoot": {"--set", "cni.install=true,cni.mode=multus", "--set-json", `cni.networks=[{"name":"x","pool":"ib"}]`,
			"--set-json", `cni.pluginConfig={"sysfsRoot":"/x"}`},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := helmTemplate(t, args...); err == nil {
				t.Errorf("helm template %q rendered:\n%s", args, out)
			}
		})
	}
}

// TestNCCLPools: two pools that both set NCCL's variables render (the daemon
// reports them on the nodes where both have devices: a mixed cluster's
// InfiniBand and RoCE pools, each NCCL's on its own nodes, are fine), as do
// the default pools.
func TestNCCLPools(t *testing.T) {
	two := `config.pools=[{"name":"ib","mode":"exclusive","selectors":{"linkLayers":["InfiniBand"]}},
 {"name":"roce","mode":"exclusive","selectors":{"linkLayers":["Ethernet"]}}]`
	objs := render(t, "--set-json", two)
	c, err := config.Parse([]byte(find(t, objs, "ConfigMap").Data["config.yaml"]))
	if err != nil || len(c.Pools) != 2 || !c.Pools[0].SetsNCCL() || !c.Pools[1].SetsNCCL() {
		t.Errorf("the daemon's reading of the ConfigMap: %+v, %v; want two NCCL pools and no error", c.Pools, err)
	}
	render(t) // the default pools
}
