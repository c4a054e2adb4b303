package helm

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
)

// TestGPUAligned: a pool with binding gpuAligned gets the alloc dir mounted read-write at its
// host path (Allocate's mounts name host paths) and passed as --alloc-dir.
func TestGPUAligned(t *testing.T) {
	objs := render(t, "--set", "devicePlugin.allocDir=/run/rdma/alloc", "--set-json",
		`config.pools=[{"name":"gpu-nics","mode":"exclusive","binding":"gpuAligned","selectors":{"linkLayers":["InfiniBand"]}},`+
			`{"name":"roce","mode":"exclusive","nccl":false,"selectors":{"linkLayers":["Ethernet"]}}]`)
	c, err := config.Parse([]byte(find(t, objs, "ConfigMap").Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the rendered pools do not load: %v", err)
	}
	if !c.Pools[0].GPUAligned() || c.Pools[1].GPUAligned() {
		t.Errorf("bindings %q, %q; want gpuAligned, none", c.Pools[0].Binding, c.Pools[1].Binding)
	}
	ds := daemonSet(t, objs)
	want := map[string]bool{"/var/lib/kubelet/device-plugins": false, "/var/run/cdi": false, "/var/lib/kube-rdma/hooks": false, "/dev": true,
		"/var/lib/kubelet/pod-resources": true, "/run/rdma/alloc": false}
	if diff := cmp.Diff(want, hostPaths(ds)); diff != "" {
		t.Errorf("host paths, true = read-only (-want +got):\n%s", diff)
	}
	dp := ds.Template.Spec.Containers[0]
	if !slices.Contains(dp.Args, "--alloc-dir=/run/rdma/alloc") {
		t.Errorf("device plugin args %q lack --alloc-dir=/run/rdma/alloc", dp.Args)
	}
	mounted := false
	for _, m := range dp.VolumeMounts {
		mounted = mounted || (m.Name == "alloc" && m.MountPath == "/run/rdma/alloc" && !m.ReadOnly)
	}
	if !mounted {
		t.Errorf("device plugin mounts %+v: no read-write alloc at /run/rdma/alloc", dp.VolumeMounts)
	}
	for _, v := range ds.Template.Spec.Volumes {
		if v.Name == "alloc" && (v.HostPath == nil || v.HostPath.Type != "DirectoryOrCreate") {
			t.Errorf("alloc volume %+v, want hostPath DirectoryOrCreate", v.HostPath)
		}
	}
	checkUnprivileged(t, ds.Template.Spec.Containers)
}

// TestGPUAlignedWithoutNodeState: the daemon still reads PodResources (read-only), to remove the
// allocation directories no container holds.
func TestGPUAlignedWithoutNodeState(t *testing.T) {
	objs := render(t, "--set", "nodeState.enabled=false", "--set-json",
		`config.pools=[{"name":"gpu-nics","mode":"exclusive","binding":"gpuAligned","selectors":{"linkLayers":["InfiniBand"]}}]`)
	ds := daemonSet(t, objs)
	want := map[string]bool{"/var/lib/kubelet/device-plugins": false, "/var/run/cdi": false, "/var/lib/kube-rdma/hooks": false, "/dev": true,
		"/var/lib/kubelet/pod-resources": true, "/var/run/kube-rdma/alloc": false}
	if diff := cmp.Diff(want, hostPaths(ds)); diff != "" {
		t.Errorf("host paths, true = read-only (-want +got):\n%s", diff)
	}
	args := ds.Template.Spec.Containers[0].Args
	for _, a := range []string{"--node-state=false", "--alloc-dir=/var/run/kube-rdma/alloc", "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"} {
		if !slices.Contains(args, a) {
			t.Errorf("device plugin args %q lack %s", args, a)
		}
	}
}

// TestGPUAlignedChained: the CNI plugin's alloc dir is the daemon's (the CNI fills the
// directories Allocate makes there): the node file's, which no chained entry names.
func TestGPUAlignedChained(t *testing.T) {
	pools := `config.pools=[{"name":"gpu-nics","mode":"exclusive","binding":"gpuAligned","selectors":{"linkLayers":["InfiniBand"]}},` +
		`{"name":"roce","mode":"exclusive","nccl":false,"selectors":{"linkLayers":["Ethernet"]}}]`
	for _, pool := range []string{"gpu-nics", "roce"} {
		objs := render(t, "--set", "devicePlugin.allocDir=/run/rdma/alloc,cni.install=true,cni.mode=chained,cni.chained.pool="+pool,
			"--set-json", pools)
		entry := find(t, objs, "ConfigMap").Data["cni-plugin.json"]
		c := parseEntry(t, objs, entry)
		if c.ResourceName != "rdma.kube-rdma.io/"+pool {
			t.Errorf("pool %s: resource %q", pool, c.ResourceName)
		}
		if strings.Contains(entry, `"allocDir"`) || c.AllocDir != "/run/rdma/alloc" {
			t.Errorf("pool %s: plugin's allocDir %q, want the daemon's /run/rdma/alloc from the node file, none in the entry:\n%s", pool, c.AllocDir, entry)
		}
	}
}
