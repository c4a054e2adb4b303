package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestDemo(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.HGX())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := Run(ctx, Options{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot, Out: &out}); err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	for _, want := range []string{
		"registered rdma.kube-rdma.io/hca",
		"rdma.kube-rdma.io/hca  0000:9a:00.0  Healthy  1     mlx5_4",
		// mlx5_8 (0000:27:00.0) shares mlx5_0's switch but is an Ethernet
		// storage NIC: the preferred pair stays InfiniBand.
		"GetPreferredAllocation(2 of 10): 0000:18:00.0, 0000:3a:00.0",
		"env NCCL_IB_HCA==mlx5_0,mlx5_1",
		"cdi rdma.kube-rdma.io/hca=0000:18:00.0",
		"kubelet sees 0000:18:00.0 Unhealthy after",
		"Healthy again after",
		"re-registered and listed again after",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	t.Log("\n" + out.String())
}
