package dra_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// TestDeviceMetadataAttributes: on every golden topology, each device's metadata carries its
// published attributes unchanged, port 1, its verbs node, and the GPUs at the least PCIe
// distance from it (all of them, and only those).
func TestDeviceMetadataAttributes(t *testing.T) {
	for _, topo := range goldens() {
		t.Run(topo.Name, func(t *testing.T) {
			tree, node := scan(t, topo)
			numa := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.NUMANodes()
			devs, _ := dra.Devices(node.RDMADevices, health(node))
			for _, d := range devs {
				m := dra.DeviceMetadata(d.RDMA, d.API.Attributes, node.GPUs, numa)
				for k, v := range d.API.Attributes {
					if got, ok := m.Attributes[string(k)]; !ok || !sameAttr(got, v) {
						t.Errorf("%s: metadata %s = %+v, published %+v", d.RDMA.Name, k, got, v)
					}
				}
				if p := m.Attributes[dra.MetaPort].IntValue; len(d.RDMA.Ports) > 0 && (p == nil || *p != 1) {
					t.Errorf("%s: port %v, want 1", d.RDMA.Name, p)
				}
				if u := m.Attributes[dra.MetaUverbs].StringValue; len(d.RDMA.CharDevices) > 0 && (u == nil || *u != d.RDMA.CharDevices[0] || !strings.Contains(*u, "uverbs")) {
					t.Errorf("%s: uverbs %v, char devices %v", d.RDMA.Name, u, d.RDMA.CharDevices)
				}
				checkClosestGPUs(t, d.RDMA, m.Attributes, node.GPUs, numa)
			}
		})
	}
}

// checkClosestGPUs: the metadata's closest GPUs are exactly the GPUs of the least rank.
func checkClosestGPUs(t *testing.T, d discovery.RDMADevice, a map[string]resourceapi.DeviceAttribute, gpus []discovery.GPU, numa int) {
	t.Helper()
	if len(gpus) == 0 {
		if _, ok := a[dra.MetaGPUs]; ok {
			t.Errorf("%s: closest GPUs on a node without GPUs", d.Name)
		}
		return
	}
	level, listed := a[dra.MetaGPULevel].StringValue, a[dra.MetaGPUs].StringValue
	if level == nil || listed == nil {
		t.Fatalf("%s: closest GPUs %v at %v", d.Name, listed, level)
	}
	names := strings.Split(*listed, ",")
	for _, g := range gpus {
		l := discovery.Distance(d.Location(), g.Location(), numa)
		in := slices.Contains(names, g.PCIAddress)
		switch {
		case l.Rank() < discovery.Level(*level).Rank():
			t.Errorf("%s: GPU %s is %s, closer than the listed level %s", d.Name, g.PCIAddress, l, *level)
		case l.Rank() == discovery.Level(*level).Rank() && !in:
			t.Errorf("%s: GPU %s is %s but not listed in %s", d.Name, g.PCIAddress, l, *listed)
		case l.Rank() > discovery.Level(*level).Rank() && in:
			t.Errorf("%s: GPU %s is %s, listed at %s", d.Name, g.PCIAddress, l, *level)
		}
	}
}

func sameAttr(a, b resourceapi.DeviceAttribute) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestDeviceMetadataFile: with DeviceMetadata on, a claim prepared through the driver's gRPC
// service gets one more CDI device, whose spec mounts the claim's metadata file at the
// in-container path the metadata API defines; the file names the NIC, its pool, port and the
// GPU under its switch (LocalNode: mlx5_0 and GPU0 0000:19:00.0, PIX). The kubelet's
// Unprepare removes both; so does the claim reconciler when the claim goes from the API server
// without one (the paths removeMetadata assumes are the helper's). The API server is the
// client-go fake: the helper reads the claim from it and nothing else here needs a real one
// (TestDriverAgainstAPIServer has one).
func TestDeviceMetadataFile(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kube := fake.NewClientset()
	dirs := pluginDirs(t)
	pluginDir, cdiDir := filepath.Join(dirs, "plugin"), t.TempDir()
	devRoot := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	d, err := dra.StartDriver(ctx, dra.DriverConfig{NodeName: "node-a", KubeClient: kube, PluginDir: pluginDir,
		RegistryDir: filepath.Join(dirs, "registry"), CDIDir: cdiDir, DevRoot: devRoot, HealthInterval: time.Hour,
		ReconcileInterval: 100 * time.Millisecond, DeviceMetadata: true, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	_, node := scan(t, nodesim.LocalNode(1))
	if err := d.Start(ctx, agent.Node{NUMANodes: 2}); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(agent.Update{Pools: []agent.Assignment{{Pool: config.Pool{Name: "nics", Frontend: config.DRA}, Members: node.RDMADevices}},
		MembersChanged: true, Healthy: health(node), GPUs: node.GPUs}); err != nil {
		t.Fatal(err)
	}
	mlx50 := dra.DeviceName(node.RDMADevices[0])
	const uid = "0d6c1a35-0000-4000-8000-0000000000b1"
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "p1-devices-x7k2q", Namespace: "default", UID: uid,
			Annotations: map[string]string{resourceapi.PodResourceClaimAnnotation: "devices"}},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
				{Request: "nic", Driver: dra.DriverName, Pool: "node-a/nics", Device: mlx50}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "0d6c1a35-0000-4000-8000-0000000000a1"}},
		},
	}
	if _, err := kube.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(pluginDir, "dra.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := drapb.NewDRAPluginClient(conn)
	ref := &drapb.Claim{Namespace: "default", Name: claim.Name, Uid: uid}
	prepare := func() {
		t.Helper()
		resp, err := c.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref}})
		if err != nil {
			t.Fatal(err)
		}
		r := resp.Claims[uid]
		want := []string{dra.CDIKind + "=" + uid + "-nic", dra.DriverName + "/metadata=" + uid + "_nic"}
		if r == nil || r.Error != "" || len(r.Devices) != 1 || !slices.Equal(r.Devices[0].CdiDeviceIds, want) {
			t.Fatalf("prepare: %+v, want one device with CDI devices %q", r, want)
		}
	}
	prepare()

	file := filepath.Join(pluginDir, dra.MetadataDir, "default_"+claim.Name, "nic", "metadata.json")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var dm metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(bytes.NewReader(data)), &dm); err != nil {
		t.Fatalf("decode %s: %v\n%s", file, err, data)
	}
	if len(dm.Requests) != 1 || dm.Requests[0].Name != "nic" || len(dm.Requests[0].Devices) != 1 {
		t.Fatalf("metadata requests %+v", dm.Requests)
	}
	dev := dm.Requests[0].Devices[0]
	str := func(k string) string {
		if v := dev.Attributes[resourceapi.QualifiedName(k)].StringValue; v != nil {
			return *v
		}
		return ""
	}
	gpu0 := node.GPUs[0]
	for k, want := range map[string]string{string(dra.AttrRDMADevice): "mlx5_0", string(dra.AttrPool): "nics", string(dra.AttrNetdev): "ibp24s0",
		"resource.kubernetes.io/pciBusID": "0000:18:00.0", dra.MetaGPUs: "0000:19:00.0", dra.MetaGPULevel: "PIX", dra.MetaGPUUUIDs: gpu0.UUID,
		dra.MetaUverbs: node.RDMADevices[0].CharDevices[0]} {
		if got := str(k); got != want || want == "" {
			t.Errorf("metadata %s = %q, want %q", k, got, want)
		}
	}
	if gpu0.PCIAddress != "0000:19:00.0" {
		t.Errorf("LocalNode's GPU0 is %s, the test expects 0000:19:00.0", gpu0.PCIAddress)
	}
	if p := dev.Attributes[resourceapi.QualifiedName(dra.MetaPort)].IntValue; p == nil || *p != 1 {
		t.Errorf("metadata port %v", p)
	}
	if dev.Driver != dra.DriverName || dev.Pool != "node-a/nics" || dev.Name != mlx50 {
		t.Errorf("metadata device %s/%s/%s", dev.Driver, dev.Pool, dev.Name)
	}

	// The CDI spec mounts the file where a container of the pod finds it by its pod claim name.
	specs, _ := filepath.Glob(filepath.Join(cdiDir, dra.DriverName+"_metadata_"+uid+"_*.json"))
	if len(specs) != 1 {
		t.Fatalf("metadata CDI specs %v", specs)
	}
	raw, err := os.ReadFile(specs[0])
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	inPod := metadata.ResourceClaimTemplateFilePath(dra.DriverName, "devices", "nic")
	if len(spec.Devices) != 1 || len(spec.Devices[0].ContainerEdits.Mounts) != 1 ||
		spec.Devices[0].ContainerEdits.Mounts[0].HostPath != file || spec.Devices[0].ContainerEdits.Mounts[0].ContainerPath != inPod {
		t.Errorf("metadata CDI spec %s:\n%s\nwant %s mounted at %s", specs[0], raw, file, inPod)
	}

	// The kubelet's Unprepare removes both.
	if _, err := c.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref}}); err != nil {
		t.Fatal(err)
	}
	metadataGone := func() bool {
		_, err := os.Stat(filepath.Dir(filepath.Dir(file)))
		s, _ := filepath.Glob(filepath.Join(cdiDir, dra.DriverName+"_metadata_*"))
		return os.IsNotExist(err) && len(s) == 0
	}
	if !metadataGone() {
		t.Error("metadata files left after the kubelet's Unprepare")
	}

	// Prepared again, then the claim goes from the API server with no Unprepare (the daemon
	// was down when the kubelet sent it): the reconciler removes the record and the metadata.
	prepare()
	if metadataGone() {
		t.Fatal("no metadata after the second prepare")
	}
	if err := kube.ResourceV1().ResourceClaims("default").Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Second, "orphan's metadata removed", metadataGone)
}
