package discovery_test

import (
	"os"
	"path/filepath"
	"slices"
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

// TestFunctionNetdevs: the netdevs DEL looks a NIC up by when its MAC and
// name are new (a VF re-probed) or its function is an SF's auxiliary
// device, on the RoCE SR-IOV node (PFs, VFs and an SF on a PF), with a
// switchdev representor added under a PF.
func TestFunctionNetdevs(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.RoCESRIOV())
	if err != nil {
		t.Fatal(err)
	}
	s := discovery.Scanner{SysRoot: tree.SysRoot}
	devs, err := s.Scan()
	if err != nil {
		t.Fatal(err)
	}
	var pf, vf, sf discovery.RDMADevice
	for _, d := range devs.RDMADevices {
		switch {
		case d.Kind == discovery.KindSF:
			sf = d
		case d.Kind == discovery.KindVF && vf.Name == "":
			vf = d
		}
	}
	for _, d := range devs.RDMADevices {
		if d.Kind == discovery.KindPF && d.PCIAddress == sf.PCIAddress {
			pf = d
		}
	}
	if pf.Name == "" || vf.Name == "" || sf.AuxDevice == "" {
		t.Fatalf("fixture: PF %q, VF %q, SF %q (aux %q)", pf.Name, vf.Name, sf.Name, sf.AuxDevice)
	}
	// A representor of one of the PF's VFs in switchdev mode hangs under the
	// PF too; the uplink says p0.
	pfNet := filepath.Join(tree.SysRoot, "bus/pci/devices", pf.PCIAddress, "net")
	if err := os.MkdirAll(filepath.Join(pfNet, "pf0vf0rep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pfNet, "pf0vf0rep", "phys_port_name"), []byte("pf0vf0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pfNet, pf.Netdevs[0], "phys_port_name"), []byte("p0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, pci, aux string
		present        bool
		netdevs        []string
		wantErr        bool
	}{
		{"PF: its uplink, not the representor", pf.PCIAddress, "", true, pf.Netdevs, false},
		{"VF", vf.PCIAddress, "", true, vf.Netdevs, false},
		{"SF: its own netdev, not its PF's", sf.PCIAddress, sf.AuxDevice, true, sf.Netdevs, false},
		{"SF gone, its PF there", sf.PCIAddress, "mlx5_core.sf.9", false, nil, false},
		{"PCI function gone", "0000:ff:1f.7", "", false, nil, false},
		{"not a name", "../devices", "", false, nil, true},
		{"empty", "", "", false, nil, true},
	} {
		present, netdevs, err := s.FunctionNetdevs(tc.pci, tc.aux)
		if present != tc.present || !slices.Equal(netdevs, tc.netdevs) || (err != nil) != tc.wantErr {
			t.Errorf("%s: FunctionNetdevs(%q, %q) = %v, %v, %v; want %v, %v, error %v",
				tc.name, tc.pci, tc.aux, present, netdevs, err, tc.present, tc.netdevs, tc.wantErr)
		}
	}
}
