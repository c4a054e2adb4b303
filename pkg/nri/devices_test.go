package nri

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// TestFromView: each pool's members' device nodes, with the host's
// major/minor where a character device is found under devRoot, else 0/0
// (matched by path); limits and CDI names from the view; every device's
// nodes and claim IDs.
func TestFromView(t *testing.T) {
	devRoot := t.TempDir()
	ib := filepath.Join(devRoot, "infiniband")
	if err := os.MkdirAll(ib, 0o755); err != nil {
		t.Fatal(err)
	}
	// uverbs0 a real character device (root only), umad0 a plain file.
	err := unix.Mknod(filepath.Join(ib, "uverbs0"), unix.S_IFCHR|0o600, int(unix.Mkdev(231, 192)))
	if errors.Is(err, unix.EPERM) {
		t.Skip("mknod needs CAP_MKNOD (CI runs as root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ib, "umad0"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	v := agent.View{
		Snapshot: &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{
			{Name: "mlx5_0", CharDevices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/umad0"}},
			{Name: "mlx5_1", CharDevices: []string{"/dev/infiniband/uverbs1"}},
		}}},
		Pools: []agent.PoolView{
			{Name: "a", Members: []string{"mlx5_0"}, Memlock: 1 << 30, CDIDevices: []string{"r/a=x"}},
			{Name: "b", Members: []string{"mlx5_1", "gone"}, Memlock: ^uint64(0), NoNCCL: true},
			{Name: "g", Binding: config.GPUAligned},
		},
		DRAPools: []agent.PoolView{{Name: "d", Members: []string{"mlx5_1"}, Memlock: 1 << 31}},
	}
	want := Devices{Pools: []Pool{
		{Name: "a", Limit: 1 << 30, CDIDevices: []string{"r/a=x"}, NCCL: true,
			Nodes: []DeviceNode{{"/dev/infiniband/uverbs0", 231, 192, "mlx5_0"}, {"/dev/infiniband/umad0", 0, 0, "mlx5_0"}}},
		{Name: "b", Limit: ^uint64(0), Nodes: []DeviceNode{{"/dev/infiniband/uverbs1", 0, 0, "mlx5_1"}}},
		// A gpuAligned pool's NCCL variables are the CNI plugin's (its env file).
		{Name: "g"},
	},
		DRAPools: []Pool{{Name: "d", Limit: 1 << 31, NCCL: true, Nodes: []DeviceNode{{"/dev/infiniband/uverbs1", 0, 0, "mlx5_1"}}}},
		// Every device's nodes, in a pool or not (a DRA claim's are in none).
		Nodes: map[string][]DeviceNode{
			"mlx5_0": {{"/dev/infiniband/uverbs0", 231, 192, "mlx5_0"}, {"/dev/infiniband/umad0", 0, 0, "mlx5_0"}},
			"mlx5_1": {{"/dev/infiniband/uverbs1", 0, 0, "mlx5_1"}},
		},
		Names: map[string]string{"mlx5_0": "mlx5_0", "mlx5_1": "mlx5_1"},
		RDMA:  map[string]discovery.RDMADevice{"mlx5_0": v.Snapshot.Node.RDMADevices[0], "mlx5_1": v.Snapshot.Node.RDMADevices[1]}}
	if diff := cmp.Diff(want, FromView(v, devRoot)); diff != "" {
		t.Errorf("FromView (-want +got):\n%s", diff)
	}
	if got := FromView(agent.View{}, devRoot); len(got.Pools) != 0 {
		t.Errorf("FromView of an empty view: %+v", got)
	}
}
