package discovery_test

import (
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestPCIFunctionExists(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.HGX())
	if err != nil {
		t.Fatal(err)
	}
	s := discovery.Scanner{SysRoot: tree.SysRoot}
	d, err := s.LookupRDMA("mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr    string
		want    bool
		wantErr bool
	}{
		{d.PCIAddress, true, false},
		{"0000:ff:1f.7", false, false},
		{"../devices", false, true},
		{"", false, true},
		{"..", false, true},
	} {
		got, err := s.PCIFunctionExists(tc.addr)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("PCIFunctionExists(%q) = %v, %v; want %v, error %v", tc.addr, got, err, tc.want, tc.wantErr)
		}
	}
}
