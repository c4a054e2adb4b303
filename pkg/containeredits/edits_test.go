package containeredits_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

func roce(name string, gids ...discovery.GID) discovery.RDMADevice {
	return discovery.RDMADevice{Name: name, CharDevices: []string{"/dev/infiniband/uverbs" + name[len(name)-1:]},
		Ports: []discovery.Port{{Port: 1, LinkLayer: "Ethernet", GIDs: gids}}}
}

func TestFabricEnv(t *testing.T) {
	v2 := discovery.GID{Index: 1, GID: "fe80:0000:0000:0000:0a00:00ff:fe00:0001", Type: "RoCE v2"}
	v2ipv4 := discovery.GID{Index: 3, GID: "0000:0000:0000:0000:0000:ffff:0a00:0001", Type: "RoCE v2"}
	ib := discovery.RDMADevice{Name: "mlx5_0", Ports: []discovery.Port{{Port: 1, LinkLayer: "InfiniBand"}}}
	for _, c := range []struct {
		name string
		devs []discovery.RDMADevice
		want map[string]string
	}{
		{"infiniband", []discovery.RDMADevice{ib}, map[string]string{"NCCL_IB_HCA": "=mlx5_0", "UCX_NET_DEVICES": "mlx5_0:1"}},
		{"roce, IPv4-mapped GID first", []discovery.RDMADevice{roce("mlx5_1", v2, v2ipv4), roce("mlx5_2", v2ipv4)},
			map[string]string{"NCCL_IB_HCA": "=mlx5_1,mlx5_2", "NCCL_IB_GID_INDEX": "3", "UCX_IB_GID_INDEX": "3", "UCX_NET_DEVICES": "mlx5_1:1,mlx5_2:1"}},
		{"roce, indexes differ", []discovery.RDMADevice{roce("mlx5_1", v2), roce("mlx5_2", v2ipv4)},
			map[string]string{"NCCL_IB_HCA": "=mlx5_1,mlx5_2", "UCX_NET_DEVICES": "mlx5_1:1,mlx5_2:1"}},
		{"mixed link layers", []discovery.RDMADevice{ib, roce("mlx5_2", v2ipv4)},
			map[string]string{"NCCL_IB_HCA": "=mlx5_0,mlx5_2", "UCX_NET_DEVICES": "mlx5_0:1,mlx5_2:1"}},
		{"two ports, in order", []discovery.RDMADevice{{Name: "mlx5_9", Ports: []discovery.Port{{Port: 1, LinkLayer: "InfiniBand"},
			{Port: 2, LinkLayer: "InfiniBand"}}}, ib}, map[string]string{"NCCL_IB_HCA": "=mlx5_9,mlx5_0", "UCX_NET_DEVICES": "mlx5_9:1,mlx5_9:2,mlx5_0:1"}},
		{"no ports known", []discovery.RDMADevice{{Name: "mlx5_7"}}, map[string]string{"NCCL_IB_HCA": "=mlx5_7"}},
	} {
		if diff := cmp.Diff(c.want, containeredits.FabricEnv(c.devs)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestWriteSpec: the version is filled in, an unchanged spec is not
// rewritten, a changed one is, and removing twice is fine.
func TestWriteSpec(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cdi", "x.json")
	spec := cdispec.Spec{Kind: "kube-rdma.io/claim", Devices: []cdispec.Device{{Name: "a",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: containeredits.CDIDeviceNodes([]string{"/dev/infiniband/uverbs0"})}}}}
	if err := containeredits.WriteSpec(path, spec); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	if err := containeredits.WriteSpec(path, spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); !st.ModTime().Equal(old) {
		t.Errorf("an unchanged spec was rewritten")
	}
	spec.Devices[0].Name = "b"
	if err := containeredits.WriteSpec(path, spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.ModTime().Equal(old) {
		t.Errorf("a changed spec was not rewritten")
	}
	for range 2 {
		if err := containeredits.RemoveSpec(path); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteSpecNoDevices: a spec with no devices, which the CDI registry
// refuses (and containerd with it every spec), is never on disk: writing
// one removes the file a pool's earlier members left.
func TestWriteSpecNoDevices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cdi", "x.json")
	full := cdispec.Spec{Kind: "rdma.kube-rdma.io/hca", Devices: []cdispec.Device{{Name: "a",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: containeredits.CDIDeviceNodes([]string{"/dev/infiniband/uverbs0"})}}}}
	empty := cdispec.Spec{Kind: full.Kind, Devices: []cdispec.Device{},
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: containeredits.CDIDeviceNodes([]string{"/dev/infiniband/rdma_cm"})}}
	for i, step := range []struct {
		spec cdispec.Spec
		want bool
	}{{empty, false}, {full, true}, {empty, false}, {empty, false}, {full, true}} {
		if err := containeredits.WriteSpec(path, step.spec); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		_, err := os.Stat(path)
		if got := err == nil; got != step.want {
			t.Errorf("step %d: spec on disk %v, want %v (stat: %v)", i, got, step.want, err)
		}
	}
}

// TestWriteSpecValidates: a spec the runtimes' CDI cache would refuse (one
// such file fails the refresh of the whole directory) is not written, and
// the file already there stays as it was; nothing else is left in the
// directory.
func TestWriteSpecValidates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.json")
	good := cdispec.Spec{Kind: "kube-rdma.io/claim", Devices: []cdispec.Device{{Name: "a",
		ContainerEdits: cdispec.ContainerEdits{DeviceNodes: containeredits.CDIDeviceNodes([]string{"/dev/infiniband/uverbs0"})}}}}
	if err := containeredits.WriteSpec(path, good); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func(*cdispec.Spec)
	}{
		{"device name with a slash", func(s *cdispec.Spec) { s.Devices[0].Name = "a/b" }},
		{"kind without a class", func(s *cdispec.Spec) { s.Kind = "kube-rdma.io" }},
		{"env without =", func(s *cdispec.Spec) { s.Devices[0].ContainerEdits.Env = []string{"NCCL_IB_HCA"} }},
		{"a device without edits", func(s *cdispec.Spec) { s.Devices[0].ContainerEdits = cdispec.ContainerEdits{} }},
		{"two devices of one name", func(s *cdispec.Spec) { s.Devices = append(s.Devices, s.Devices[0]) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			bad.Devices = []cdispec.Device{{Name: "a", ContainerEdits: cdispec.ContainerEdits{
				DeviceNodes: containeredits.CDIDeviceNodes([]string{"/dev/infiniband/uverbs1"})}}}
			tc.edit(&bad)
			err := containeredits.WriteSpec(path, bad)
			if err == nil || !strings.Contains(err.Error(), "the runtime would refuse it") {
				t.Errorf("WriteSpec: %v, want the runtime's refusal", err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Errorf("the spec there changed:\n%s", after)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("the directory holds %d entries, want the one spec", len(ents))
			}
		})
	}
}
