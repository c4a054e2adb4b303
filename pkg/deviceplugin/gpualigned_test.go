package deviceplugin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// On nodesim.HGX: gpu-nics takes the eight InfiniBand NICs mlx5_0..7, roce
// the two Ethernet ones.
const alignedConfig = `resourcePrefix: rdma.example.com
pools:
- {name: gpu-nics, mode: exclusive, binding: gpuAligned, selectors: {linkLayers: [InfiniBand]}}
- {name: roce, mode: exclusive, nccl: false, selectors: {linkLayers: [Ethernet]}}
`

const aligned = "rdma.example.com/gpu-nics"

// startAligned runs the daemon on HGX with alignedConfig, the given netns
// mode and alloc dir ("-" for a fresh temporary directory), CDI on, and
// waits for the roce pool (always served).
func startAligned(t *testing.T, mode rdma.NetnsMode, allocDir string) *env {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, alignedConfig)
	if allocDir == "-" {
		allocDir = t.TempDir()
	}
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.NetnsMode = fakeNetns{Mode: mode}
		c.AllocDir = allocDir
		c.CDIDir = filepath.Join(t.TempDir(), "cdi")
	})
	e.WaitFor(t, 5*time.Second, "roce listed", func(k *kubeletstub.Kubelet) bool { _, ok := k.Devices("rdma.example.com/roce"); return ok })
	return e
}

func slots(n int) []string {
	var out []string
	for i := range n {
		out = append(out, allocdir.SlotID("gpu-nics", i))
	}
	return out
}

func readPoolFile(t *testing.T, e *env) allocdir.PoolFile {
	t.Helper()
	f, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAlignedSlotsHealthAndPoolFile(t *testing.T) {
	e := startAligned(t, rdma.NetnsExclusive, "-")
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	devs, _ := e.Kubelet.Devices(aligned)
	var want []*pluginapi.Device
	for _, id := range slots(8) {
		want = append(want, &pluginapi.Device{ID: id, Health: pluginapi.Healthy}) // no topology
	}
	if diff := cmp.Diff(want, devs, protocmp.Transform()); diff != "" {
		t.Errorf("slots (-want +got)\n%s", diff)
	}
	members := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	wantFile := allocdir.PoolFile{Pool: "gpu-nics", Resource: aligned, Binding: "gpuAligned", Members: members, Healthy: members}
	if diff := cmp.Diff(wantFile, readPoolFile(t, e)); diff != "" {
		t.Errorf("pool.json at start (-want +got)\n%s", diff)
	}
	if fi, err := os.Stat(allocdir.PoolDir(e.Cfg.AllocDir, "gpu-nics")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("pool dir: %v, %v; want mode 0755", fi, err)
	}

	// Two members down: the two highest slots go unhealthy, whichever
	// members they are.
	for _, dev := range []string{"mlx5_2", "mlx5_5"} {
		if err := e.Tree.SetPortState(dev, 1, nodesim.StateDown, nodesim.PhysDisabled); err != nil {
			t.Fatal(err)
		}
	}
	e.WaitFor(t, 5*time.Second, "slots 6 and 7 unhealthy", func(k *kubeletstub.Kubelet) bool {
		h := health(k, aligned)
		return h["gpu-nics-slot-6"] == pluginapi.Unhealthy && h["gpu-nics-slot-7"] == pluginapi.Unhealthy
	})
	for id, h := range health(e.Kubelet, aligned) {
		if wantH := pluginapi.Healthy; id != "gpu-nics-slot-6" && id != "gpu-nics-slot-7" && h != wantH {
			t.Errorf("%s is %s, want %s", id, h, wantH)
		}
	}
	wantFile.Healthy = []string{"mlx5_0", "mlx5_1", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_7"}
	poll(t, 5*time.Second, "pool.json rewritten", func() bool {
		f, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics")
		return err == nil && cmp.Equal(wantFile, f)
	})

	// GetPreferredAllocation: any slots, healthy ones first, in slot order.
	got, err := e.Kubelet.GetPreferredAllocation(context.Background(), aligned,
		[]string{"gpu-nics-slot-7", "gpu-nics-slot-5", "gpu-nics-slot-2", "gpu-nics-slot-6"}, []string{"gpu-nics-slot-6"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"gpu-nics-slot-6", "gpu-nics-slot-2"}, got); diff != "" {
		t.Errorf("preferred (-want +got)\n%s", diff)
	}

	if err := e.Tree.SetPortState("mlx5_2", 1, nodesim.StateActive, nodesim.PhysLinkUp); err != nil {
		t.Fatal(err)
	}
	e.WaitFor(t, 5*time.Second, "slot 6 healthy again", hasHealth(aligned, "gpu-nics-slot-6", pluginapi.Healthy))
	wantFile.Healthy = []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_6", "mlx5_7"}
	poll(t, 5*time.Second, "pool.json rewritten again", func() bool {
		f, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics")
		return err == nil && cmp.Equal(wantFile, f)
	})
	if entries, _ := os.ReadDir(allocdir.PoolDir(e.Cfg.AllocDir, "gpu-nics")); len(entries) != 1 {
		t.Errorf("pool dir holds %d entries, want pool.json only (no temporary files left)", len(entries))
	}
}

func TestAlignedAllocate(t *testing.T) {
	e := startAligned(t, rdma.NetnsExclusive, "-")
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	ctr1 := []string{"gpu-nics-slot-3", "gpu-nics-slot-1"}
	ctr2 := []string{"gpu-nics-slot-0"}
	resp, err := e.Kubelet.Allocate(context.Background(), aligned, ctr1, ctr2)
	if err != nil {
		t.Fatal(err)
	}
	// Every member's device nodes, whatever the slots: the CNI binds the NICs.
	var nodes []string
	for i := range 8 {
		nodes = append(nodes, fmt.Sprintf("/dev/infiniband/uverbs%d", i), fmt.Sprintf("/dev/infiniband/umad%d", i), fmt.Sprintf("/dev/infiniband/issm%d", i))
	}
	nodes = append(nodes, "/dev/infiniband/rdma_cm")
	// allocID: printf 'gpu-nics-slot-1,gpu-nics-slot-3' | sha256sum | cut -c1-16, likewise 'gpu-nics-slot-0'.
	allocIDs := []string{"c08b912597a02f33", "90f72a0346a3949d"}
	// One CDI device, "all", of the pool's spec: the same device nodes and
	// the spec's memlock hook (no NRI needed).
	const cdiAll = "rdma.example.com/gpu-nics=all"
	want := func(allocID string) *pluginapi.ContainerAllocateResponse {
		return &pluginapi.ContainerAllocateResponse{
			CdiDevices:  []*pluginapi.CDIDevice{{Name: cdiAll}},
			Annotations: map[string]string{"cdi.k8s.io/kube-rdma_gpu-nics": cdiAll},
			Devices:     spec(e, nodes...),
			Envs: map[string]string{
				"NCCL_CONF_FILE":              "/var/run/kube-rdma/gpu-nics/nccl.conf",
				"KUBE_RDMA_GPU_NICS_ENV_FILE": "/var/run/kube-rdma/gpu-nics/env",
			},
			Mounts: []*pluginapi.Mount{{
				ContainerPath: "/var/run/kube-rdma/gpu-nics",
				HostPath:      filepath.Join(e.Cfg.AllocDir, "gpu-nics", allocID),
				ReadOnly:      true,
			}},
		}
	}
	wantResp := &pluginapi.AllocateResponse{ContainerResponses: []*pluginapi.ContainerAllocateResponse{want(allocIDs[0]), want(allocIDs[1])}}
	if diff := cmp.Diff(wantResp, resp, protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	for _, id := range allocIDs {
		dir := filepath.Join(e.Cfg.AllocDir, "gpu-nics", id)
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Errorf("allocation dir %s: %v, %v; want a directory, mode 0755", dir, fi, err)
			continue
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("allocation dir %s holds %d entries, want none", dir, len(entries))
		}
	}
	// The same slots again (a later pod): the directory is emptied of the
	// earlier pod's files before the CNI writes the new ones.
	dir := filepath.Join(e.Cfg.AllocDir, "gpu-nics", allocIDs[0])
	writeFile(t, filepath.Join(dir, "nccl.conf"), "NCCL_IB_HCA==mlx5_0,mlx5_1\n")
	if _, err := e.Kubelet.Allocate(context.Background(), aligned, ctr1); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("after a second Allocate %s holds %d entries, want none", dir, len(entries))
	}
	for _, c := range resp.ContainerResponses {
		if _, ok := c.Envs["NCCL_IB_HCA"]; ok {
			t.Errorf("response has NCCL_IB_HCA: %v", c)
		}
	}
	data, err := os.ReadFile(filepath.Join(e.Cfg.CDIDir, "kube-rdma-gpu-nics.json"))
	if err != nil {
		t.Fatalf("CDI spec of the gpuAligned pool: %v", err)
	}
	var cdiSpec cdispec.Spec
	if err := json.Unmarshal(data, &cdiSpec); err != nil {
		t.Fatal(err)
	}
	var specNodes []string
	for _, d := range cdiSpec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			specNodes = append(specNodes, n.Path)
		}
	}
	for _, n := range cdiSpec.ContainerEdits.DeviceNodes {
		specNodes = append(specNodes, n.Path)
	}
	if len(cdiSpec.Devices) != 1 || cdiSpec.Devices[0].Name != "all" || cdiSpec.Kind != "rdma.example.com/gpu-nics" || !cmp.Equal(nodes, specNodes) {
		t.Errorf("CDI spec of the gpuAligned pool: kind %s, %d devices, nodes %v; want one device \"all\" with every member's nodes %v", cdiSpec.Kind, len(cdiSpec.Devices), specNodes, nodes)
	}
	if _, err := os.Stat(filepath.Join(e.Cfg.CDIDir, "kube-rdma-roce.json")); err != nil {
		t.Errorf("CDI spec of the plain pool: %v", err)
	}

	for name, ids := range map[string][]string{
		"unknown slot":       {"gpu-nics-slot-8"},
		"device ID of a NIC": {"0000:18:00.0"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := e.Kubelet.Allocate(context.Background(), aligned, ids); status.Code(err) != codes.InvalidArgument {
				t.Errorf("got %v, want InvalidArgument", err)
			}
		})
	}
}

func TestAlignedAllocateDirFailure(t *testing.T) {
	root := t.TempDir()
	e := startAligned(t, rdma.NetnsExclusive, root)
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	// A file where the allocation directory must go.
	ids := []string{"gpu-nics-slot-0"}
	writeFile(t, filepath.Join(root, "gpu-nics", allocdir.AllocID(ids)), "")
	if _, err := e.Kubelet.Allocate(context.Background(), aligned, ids); status.Code(err) != codes.Internal {
		t.Errorf("got %v, want Internal", err)
	}
}

func TestAlignedRefused(t *testing.T) {
	fix := "Fix: rdma system set netns exclusive (before any RDMA device is in use), or the ib_core module parameter netns_mode=0 at boot"
	tests := []struct {
		name     string
		mode     rdma.NetnsMode
		allocDir string
		want     string
	}{
		{"shared netns mode", rdma.NetnsShared, "-", `pool "gpu-nics" has binding gpuAligned but the RDMA subsystem's netns mode is shared, not exclusive; the pool is not served: ` +
			"its containers get the device nodes of every NIC of the pool, and only in exclusive mode is an RDMA device usable solely " +
			"from the network namespace it is in. " + fix},
		{"unknown netns mode", rdma.NetnsUnknown, "-", `pool "gpu-nics" has binding gpuAligned but the RDMA subsystem's netns mode is unknown, not exclusive; the pool is not served: ` +
			"its containers get the device nodes of every NIC of the pool, and only in exclusive mode is an RDMA device usable solely " +
			"from the network namespace it is in. " + fix},
		{"no alloc dir", rdma.NetnsExclusive, "", `pool "gpu-nics" has binding gpuAligned but --alloc-dir is empty; the pool is not served: ` +
			"its containers need an allocation directory (set --alloc-dir, or in the chart give a pool binding gpuAligned in its values)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.allocDir == "-" {
				// A pool file of an earlier run, when the node was in exclusive mode.
				tt.allocDir = t.TempDir()
				if err := os.MkdirAll(allocdir.PoolDir(tt.allocDir, "gpu-nics"), 0o755); err != nil {
					t.Fatal(err)
				}
				writeFile(t, allocdir.PoolFilePath(tt.allocDir, "gpu-nics"), `{"pool": "gpu-nics"}`)
			}
			e := startAligned(t, tt.mode, tt.allocDir)
			v, _ := e.Agent.View()
			if !slices.Contains(v.ConfigErrors, tt.want) {
				t.Errorf("config errors %q lack\n%s", v.ConfigErrors, tt.want)
			}
			for _, p := range v.Pools {
				if p.Name == "gpu-nics" {
					t.Errorf("view serves the refused pool: %+v", p)
				}
			}
			if _, ok := e.Kubelet.Devices(aligned); ok {
				t.Error("the refused pool registered with the kubelet")
			}
			for _, r := range e.Kubelet.Registrations() {
				if r.ResourceName == aligned {
					t.Error("the refused pool registered with the kubelet")
				}
			}
			if tt.allocDir != "" {
				if _, err := allocdir.ReadPoolFile(e.Cfg.AllocDir, "gpu-nics"); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("pool.json of a refused pool: %v, want none", err)
				}
			}
		})
	}
}

func TestAlignedPoolFileRemovedWithBinding(t *testing.T) {
	e := startAligned(t, rdma.NetnsExclusive, "-")
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	readPoolFile(t, e)
	// The same pool without the binding: one kubelet device per NIC, no pool file.
	writeFile(t, e.Cfg.ConfigFile, strings.Replace(alignedConfig, "binding: gpuAligned, ", "", 1))
	e.WaitFor(t, 5*time.Second, "NICs listed by PCI address", hasHealth(aligned, "0000:18:00.0", pluginapi.Healthy))
	if _, err := os.Stat(allocdir.PoolFilePath(e.Cfg.AllocDir, "gpu-nics")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pool.json after the binding was removed: %v, want none", err)
	}
}

func TestAlignedAllocDirsRemovedWhenNotHeld(t *testing.T) {
	pr := podrestest.Start(t)
	client, err := grpcclient.Dial(pr.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, alignedConfig)
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile = conf
		c.NetnsMode = fakeNetns{Mode: rdma.NetnsExclusive}
		c.AllocDir = t.TempDir()
		c.Allocations = client
		c.AllocGCInterval = 10 * time.Millisecond
		c.AllocGCGrace = time.Nanosecond
	})
	e.WaitFor(t, 5*time.Second, "eight slots", func(k *kubeletstub.Kubelet) bool { return len(health(k, aligned)) == 8 })
	held, freed := []string{"gpu-nics-slot-3", "gpu-nics-slot-1"}, []string{"gpu-nics-slot-0"}
	dir := func(ids []string) string {
		return allocdir.AllocPath(e.Cfg.AllocDir, "gpu-nics", allocdir.AllocID(ids))
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }

	// While List fails nothing is removed, held or not.
	pr.Fail(errAny)
	if _, err := e.Kubelet.Allocate(context.Background(), aligned, held, freed); err != nil {
		t.Fatal(err)
	}
	calls := pr.ListCalls.Load()
	poll(t, 5*time.Second, "two failed Lists", func() bool { return pr.ListCalls.Load() >= calls+2 })
	if !exists(dir(held)) || !exists(dir(freed)) {
		t.Fatalf("a failed List removed allocation directories: held %v, freed %v", exists(dir(held)), exists(dir(freed)))
	}

	// Only the held container's directory stays, and what is not an
	// allocation directory.
	other := filepath.Join(allocdir.PoolDir(e.Cfg.AllocDir, "gpu-nics"), "not-an-alloc")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	pr.SetPods(podrestest.Pod{Namespace: "ns", Name: "trainer", Devices: map[string][]string{aligned: held}})
	pr.Fail(nil)
	poll(t, 5*time.Second, "the freed slots' directory removed", func() bool { return !exists(dir(freed)) })
	for _, p := range []string{dir(held), other, allocdir.PoolFilePath(e.Cfg.AllocDir, "gpu-nics")} {
		if !exists(p) {
			t.Errorf("%s removed", p)
		}
	}
}
