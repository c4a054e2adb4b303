package helm

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	drcel "k8s.io/dynamic-resource-allocation/cel"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

const draPools = `config.pools=[
 {"name":"ib","mode":"exclusive","frontend":"dra","selectors":{"linkLayers":["InfiniBand"]}},
 {"name":"roce","mode":"shared","nccl":false,"selectors":{"linkLayers":["Ethernet"],"kinds":["PF"]}}]`

type deviceClassSpec struct {
	Selectors []struct {
		CEL struct {
			Expression string `json:"expression"`
		} `json:"cel"`
	} `json:"selectors"`
	ExtendedResourceName *string `json:"extendedResourceName"`
}

func deviceClasses(t *testing.T, objs []object) map[string]deviceClassSpec {
	t.Helper()
	out := map[string]deviceClassSpec{}
	for _, o := range objs {
		if o.Kind != "DeviceClass" {
			continue
		}
		if o.APIVersion != "resource.k8s.io/v1" {
			t.Errorf("DeviceClass %s: apiVersion %s, want resource.k8s.io/v1", o.Metadata.Name, o.APIVersion)
		}
		var s deviceClassSpec
		if err := json.Unmarshal(o.Spec, &s); err != nil {
			t.Fatal(err)
		}
		out[o.Metadata.Name] = s
	}
	return out
}

func rulesFile(t *testing.T, name string) []rule {
	t.Helper()
	data, err := os.ReadFile("kube-rdma/files/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var r []rule
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDRAOff: by default nothing of the DRA front end is rendered, even with a dra pool.
func TestDRAOff(t *testing.T) {
	objs := render(t, "--set-json", draPools)
	if dc := deviceClasses(t, objs); len(dc) != 0 {
		t.Errorf("DeviceClasses with dra.enabled=false: %v", dc)
	}
	ds := daemonSet(t, objs)
	for _, a := range ds.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--dra") {
			t.Errorf("device plugin arg %s with dra.enabled=false", a)
		}
	}
	for p := range hostPaths(ds) {
		if strings.Contains(p, "/plugins/") || strings.HasSuffix(p, "/plugins_registry") {
			t.Errorf("host path %s mounted with dra.enabled=false", p)
		}
	}
	if diff := cmp.Diff(append(rulesFile(t, "node-state-rules.yaml"), rulesFile(t, "netdev-check-rules.yaml")...), find(t, objs, "ClusterRole").Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
}

// TestDRAOn: dra.enabled passes --dra with the kubelet's plugin and registration directories,
// mounted read-write at their host paths, adds exactly the rules of files/dra-rules.yaml
// (which pkg/dra's API server test runs the driver under), and renders one DeviceClass per
// dra pool whose selector picks that pool's devices as pkg/dra publishes them, and no other
// pool's.
func TestDRAOn(t *testing.T) {
	objs := render(t, "--set", "dra.enabled=true", "--set", "hostPaths.kubeletDir=/data/kubelet", "--set-json", draPools)
	ds := daemonSet(t, objs)
	args := ds.Template.Spec.Containers[0].Args
	for _, a := range []string{"--dra", "--dra-plugin-dir=/data/kubelet/plugins/rdma.kube-rdma.io", "--dra-registry-dir=/data/kubelet/plugins_registry"} {
		if !slices.Contains(args, a) {
			t.Errorf("device plugin args %q lack %s", args, a)
		}
	}
	paths := hostPaths(ds)
	for _, p := range []string{"/data/kubelet/plugins/rdma.kube-rdma.io", "/data/kubelet/plugins_registry"} {
		if ro, ok := paths[p]; !ok || ro {
			t.Errorf("host paths %v: want %s read-write", paths, p)
		}
	}
	for _, m := range ds.Template.Spec.Containers[0].VolumeMounts {
		if strings.HasPrefix(m.Name, "dra-") && !strings.HasPrefix(m.MountPath, "/data/kubelet/plugins") {
			t.Errorf("mount %s at %s: want the host path (the registration names the socket's host path)", m.Name, m.MountPath)
		}
	}
	want := slices.Concat(rulesFile(t, "node-state-rules.yaml"), rulesFile(t, "dra-rules.yaml"), rulesFile(t, "netdev-check-rules.yaml"))
	if diff := cmp.Diff(want, find(t, objs, "ClusterRole").Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}

	classes := deviceClasses(t, objs)
	if len(classes) != 1 {
		t.Fatalf("DeviceClasses %v, want one for pool ib", classes)
	}
	ib, ok := classes["ib.rdma.kube-rdma.io"]
	if !ok || len(ib.Selectors) != 1 {
		t.Fatalf("DeviceClasses %+v, want ib.rdma.kube-rdma.io with one selector", classes)
	}
	if ib.ExtendedResourceName == nil || *ib.ExtendedResourceName != "rdma.kube-rdma.io/ib" {
		t.Errorf("extendedResourceName %v, want rdma.kube-rdma.io/ib", ib.ExtendedResourceName)
	}
	checkSelector(t, ib.Selectors[0].CEL.Expression, "ib")

	// Without extendedResourceName; without node state: only the DRA rules, still a token.
	objs = render(t, "--set", "dra.enabled=true,dra.extendedResourceName=false,nodeState.enabled=false", "--set-json", draPools)
	if dc := deviceClasses(t, objs)["ib.rdma.kube-rdma.io"]; dc.ExtendedResourceName != nil {
		t.Errorf("extendedResourceName %q with dra.extendedResourceName=false", *dc.ExtendedResourceName)
	}
	if diff := cmp.Diff(append(rulesFile(t, "dra-rules.yaml"), rulesFile(t, "netdev-check-rules.yaml")...), find(t, objs, "ClusterRole").Rules); diff != "" {
		t.Errorf("ClusterRole rules without node state (-want +got):\n%s", diff)
	}
	// The DRA front end publishes ResourceSlices: without node state the daemon still needs
	// its token, or it exits at start on every node ("--dra: no in-cluster config").
	if diff := cmp.Diff([]string{"device-plugin"}, tokenContainers(t, objs)); diff != "" {
		t.Errorf("containers with a service account token, dra without node state (-want +got):\n%s", diff)
	}

	// Claims get CDI devices: no CDI directory, no DRA.
	if out, err := helmTemplate(t, "--set", "dra.enabled=true", "--set", "devicePlugin.cdiDir="); err == nil || !strings.Contains(string(out), "dra.enabled needs devicePlugin.cdiDir") {
		t.Errorf("dra.enabled without devicePlugin.cdiDir: err %v, output %s", err, out)
	}
}

// checkSelector evaluates the DeviceClass's CEL selector, with the scheduler's compiler,
// against the devices pkg/dra publishes for the HGX topology: every device published in
// pool matches, the same devices published in another pool do not.
func checkSelector(t *testing.T, expr, pool string) {
	t.Helper()
	tree, err := nodesim.Build(t.TempDir(), nodesim.HGX())
	if err != nil {
		t.Fatal(err)
	}
	n, err := discovery.Scanner{SysRoot: tree.SysRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	healthy := map[string]bool{}
	for _, d := range n.RDMADevices {
		healthy[d.Name] = true
	}
	prog := drcel.GetCompiler(drcel.Features{}).CompileCELExpression(expr, drcel.Options{})
	if prog.Error != nil {
		t.Fatalf("compile %q: %v", expr, prog.Error)
	}
	for _, p := range []string{pool, "other"} {
		devs, errs := dra.Devices(n.RDMADevices, healthy)
		if len(errs) > 0 || len(devs) == 0 {
			t.Fatalf("dra.Devices: %d devices, %v", len(devs), errs)
		}
		dra.InPool(devs, p)
		for _, d := range devs {
			ok, _, err := prog.DeviceMatches(context.Background(), drcel.Device{Driver: dra.DriverName, Attributes: d.API.Attributes})
			if err != nil || ok != (p == pool) {
				t.Errorf("%q on %s published in pool %s: %v, %v; want %v", expr, d.API.Name, p, ok, err, p == pool)
			}
		}
	}
}

// TestDRAChained: chained to a dra pool, the plugin entry reads the claims' records where the
// daemon writes them (--dra-plugin-dir, mounted at its host path, then claims/), and nothing of
// PodResources; chained to a device plugin pool with DRA on, the entry is as without DRA.
func TestDRAChained(t *testing.T) {
	for _, tc := range []struct {
		kubeletDir string
		want       string
	}{
		{"/var/lib/kubelet", claimrecord.DefaultDir},
		{"/data/kubelet/", "/data/kubelet/plugins/rdma.kube-rdma.io/claims"},
	} {
		objs := render(t, "--set", "dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=ib",
			"--set", "hostPaths.kubeletDir="+tc.kubeletDir, "--set-json", draPools)
		c := parseEntry(t, objs, find(t, objs, "ConfigMap").Data["cni-plugin.json"])
		if !c.FromDRA() || c.DRAClaimsDir != tc.want || c.ResourceName != "" {
			t.Errorf("kubeletDir %s: plugin entry: dra %v, claims dir %q, resource %q; want claims dir %s",
				tc.kubeletDir, c.FromDRA(), c.DRAClaimsDir, c.ResourceName, tc.want)
		}
		var pluginDir string
		for _, a := range daemonSet(t, objs).Template.Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(a, "--dra-plugin-dir="); ok {
				pluginDir = v
			}
		}
		if got := dra.ClaimsDir(pluginDir); got != c.DRAClaimsDir {
			t.Errorf("the daemon writes the records in %s, the plugin reads %s", got, c.DRAClaimsDir)
		}
	}
	objs := render(t, "--set", "dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=roce", "--set-json", draPools)
	if c := parseEntry(t, objs, find(t, objs, "ConfigMap").Data["cni-plugin.json"]); c.FromDRA() || c.ResourceName != "rdma.kube-rdma.io/roce" {
		t.Errorf("chained to a device plugin pool: dra %v, resource %q", c.FromDRA(), c.ResourceName)
	}

	for name, args := range map[string][]string{
		"chained to a dra pool without dra.enabled": {"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib", "--set-json", draPools},
		"multus network of a dra pool": {"--set", "dra.enabled=true,cni.install=true,cni.mode=multus", "--set-json", draPools,
			"--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib"}]`},
	} {
		if out, err := helmTemplate(t, args...); err == nil || !strings.Contains(string(out), "frontend dra") {
			t.Errorf("%s: err %v, output %s", name, err, out)
		}
	}
}

// TestDRAClaimStatus: the daemon writes the claims' network status, and gets exactly the rule
// of files/claim-status-rules.yaml (which pkg/claimstatus's API server test runs it under), only
// when chained to a dra pool with dra.claimStatus (the default); otherwise it is told not to.
func TestDRAClaimStatus(t *testing.T) {
	base := slices.Concat(rulesFile(t, "node-state-rules.yaml"), rulesFile(t, "dra-rules.yaml"))
	withStatus := slices.Concat(base, rulesFile(t, "claim-status-rules.yaml"), rulesFile(t, "netdev-check-rules.yaml"))
	without := slices.Concat(base, rulesFile(t, "netdev-check-rules.yaml"))
	for _, tc := range []struct {
		name  string
		set   string
		rules []rule
		flag  string
	}{
		{"chained to a dra pool", "dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=ib", withStatus, "--dra-claim-status=true"},
		{"dra.claimStatus=false", "dra.enabled=true,dra.claimStatus=false,cni.install=true,cni.mode=chained,cni.chained.pool=ib", without, "--dra-claim-status=false"},
		{"chained to a device plugin pool", "dra.enabled=true,cni.install=true,cni.mode=chained,cni.chained.pool=roce", without, "--dra-claim-status=false"},
		{"not chained", "dra.enabled=true", without, "--dra-claim-status=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, "--set", tc.set, "--set-json", draPools)
			if diff := cmp.Diff(tc.rules, find(t, objs, "ClusterRole").Rules); diff != "" {
				t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
			}
			if args := daemonSet(t, objs).Template.Spec.Containers[0].Args; !slices.Contains(args, tc.flag) {
				t.Errorf("device plugin args %q lack %s", args, tc.flag)
			}
		})
	}
}

// TestDRADeviceMetadata: the claims' metadata files are on by default and off with
// dra.deviceMetadata=false; without dra the daemon gets no such flag.
func TestDRADeviceMetadata(t *testing.T) {
	for _, tc := range []struct{ set, want, not string }{
		{"dra.enabled=true", "--dra-device-metadata=true", "--dra-device-metadata=false"},
		{"dra.enabled=true,dra.deviceMetadata=false", "--dra-device-metadata=false", "--dra-device-metadata=true"},
	} {
		args := daemonSet(t, render(t, "--set", tc.set, "--set-json", draPools)).Template.Spec.Containers[0].Args
		if !slices.Contains(args, tc.want) || slices.Contains(args, tc.not) {
			t.Errorf("%s: device plugin args %q, want %s", tc.set, args, tc.want)
		}
	}
	for _, a := range daemonSet(t, render(t)).Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--dra-device-metadata") {
			t.Errorf("without dra.enabled: device plugin arg %s", a)
		}
	}
}
