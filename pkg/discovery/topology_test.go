package discovery

import (
	"slices"
	"testing"
)

func TestDistance(t *testing.T) {
	loc := func(root string, numa int, path ...string) Location {
		return Location{PCIeRoot: root, PCIPath: path, NUMANode: numa}
	}
	// One switch: root port 15:01.0, upstream port 16:00.0, downstream ports 17:0x.0.
	nic := loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0")
	tests := []struct {
		name      string
		a, b      Location
		numaNodes int
		want      Level
	}{
		{"same switch, different downstream ports", nic,
			loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0"), 2, PIX},
		{"functions of one device", nic,
			loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.1"), 2, PIX},
		{"gpu behind a second switch level (DGX)", nic,
			loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:19:00.0", "0000:1a:00.0", "0000:1b:00.0"), 2, PXB},
		{"two switches below one root port", loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0", "0000:19:00.0", "0000:1a:00.0"),
			loc("pci0000:15", 0, "0000:15:01.0", "0000:16:00.0", "0000:17:01.0", "0000:1c:00.0", "0000:1d:00.0", "0000:1e:00.0"), 2, PXB},
		{"different root ports, one host bridge", nic,
			loc("pci0000:15", 0, "0000:15:02.0", "0000:20:00.0"), 2, PHB},
		{"endpoints on the root bus", loc("pci0000:00", 0, "0000:00:03.0"), loc("pci0000:00", 0, "0000:00:04.0"), 1, PHB},
		{"different host bridges, same numa", nic, loc("pci0000:37", 0, "0000:37:01.0", "0000:38:00.0"), 2, NODE},
		{"different numa", nic, loc("pci0000:97", 1, "0000:97:01.0", "0000:98:00.0"), 2, SYS},
		{"unknown numa on a two-node host", loc("pci0001:00", -1, "0001:00:00.0"), loc("pci0002:00", -1, "0002:00:00.0"), 2, SYS},
		{"unknown numa on a one-node host", loc("pci0001:00", -1, "0001:00:00.0"), loc("pci0002:00", -1, "0002:00:00.0"), 1, NODE},
		{"unknown numa, no numa info at all", loc("pci0001:00", -1, "0001:00:00.0"), loc("pci0002:00", 0, "0002:00:00.0"), 0, NODE},
		{"virtual device, two-node host", nic, loc("", -1), 2, SYS},
		{"virtual device, one-node host", nic, loc("", -1), 1, NODE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Distance(tt.a, tt.b, tt.numaNodes); got != tt.want {
				t.Errorf("Distance(a, b) = %s, want %s", got, tt.want)
			}
			if got := Distance(tt.b, tt.a, tt.numaNodes); got != tt.want {
				t.Errorf("Distance(b, a) = %s, want %s (not symmetric)", got, tt.want)
			}
		})
	}
}

func TestLevelRank(t *testing.T) {
	for i := 1; i < len(Levels); i++ {
		if Levels[i-1].Rank() >= Levels[i].Rank() {
			t.Errorf("%s ranks at or after %s", Levels[i-1], Levels[i])
		}
	}
	if Level("X").Rank() <= SYS.Rank() {
		t.Errorf("an unknown level ranks before SYS")
	}
}

func TestPCITopology(t *testing.T) {
	const dev = "/s/devices"
	tests := []struct {
		name, real string
		root       string
		path       []string
	}{
		{"bare metal", dev + "/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0",
			"pci0000:15", []string{"0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"}},
		{"SF below its PF", dev + "/pci0000:00/0000:00:02.0/0000:08:00.0/mlx5_core.sf.2",
			"pci0000:00", []string{"0000:00:02.0", "0000:08:00.0"}},
		{"Hyper-V guest", dev + "/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/0ed0-guid/pci0101:00/0101:00:00.0",
			"pci0101:00", []string{"0101:00:00.0"}},
		{"behind Intel VMD", dev + "/pci0000:00/0000:00:0e.0/pci10000:e0/10000:e0:1d.0/10000:e1:00.0",
			"pci0000:00", []string{"0000:00:0e.0", "10000:e0:1d.0", "10000:e1:00.0"}},
		{"upper case hex", dev + "/pci0000:3B/0000:3B:00.0", "pci0000:3B", []string{"0000:3b:00.0"}},
		{"virtual", dev + "/virtual/net/veth0", "", nil},
		{"platform device", dev + "/platform/soc/hns-roce", "", nil},
		{"outside devices", "/s/bus/pci/devices/0000:18:00.0", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root, path := pciTopology(dev, tt.real)
			if root != tt.root || !slices.Equal(path, tt.path) {
				t.Errorf("pciTopology = %q %q, want %q %q", root, path, tt.root, tt.path)
			}
		})
	}
}
