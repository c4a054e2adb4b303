package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

func TestParseGood(t *testing.T) {
	yamlText := `
resourcePrefix: rdma.example.com
pools:
- name: gpu-nics
  mode: exclusive
  selectors:
    vendors: ["0x15B3"]
    linkLayers: [InfiniBand]
- name: roce_shared
  mode: shared
  slots: 8
  nccl: false
  selectors:
    linkLayers: [Ethernet]
- name: aligned
  mode: exclusive
  binding: gpuAligned
  nccl: false
  selectors:
    vendors: ["15b3"]
    linkLayers: [Ethernet]
- name: dra-vfs
  mode: exclusive
  frontend: dra
  nccl: false
  selectors:
    vendors: ["8086"]
    linkLayers: [InfiniBand]
`
	jsonText := `{"resourcePrefix":"rdma.example.com","pools":[
 {"name":"gpu-nics","mode":"exclusive","selectors":{"vendors":["0x15B3"],"linkLayers":["InfiniBand"]}},
 {"name":"roce_shared","mode":"shared","slots":8,"nccl":false,"selectors":{"linkLayers":["Ethernet"]}},
 {"name":"aligned","mode":"exclusive","binding":"gpuAligned","nccl":false,"selectors":{"vendors":["15b3"],"linkLayers":["Ethernet"]}},
 {"name":"dra-vfs","mode":"exclusive","frontend":"dra","nccl":false,"selectors":{"vendors":["8086"],"linkLayers":["InfiniBand"]}}]}`
	no := false
	want := Config{ResourcePrefix: "rdma.example.com", Pools: []Pool{
		{Name: "gpu-nics", Mode: Exclusive, Selectors: Selectors{Vendors: []string{"0x15B3"}, LinkLayers: []string{"InfiniBand"}}},
		{Name: "roce_shared", Mode: Shared, Slots: 8, NCCL: &no, Selectors: Selectors{LinkLayers: []string{"Ethernet"}}},
		{Name: "aligned", Mode: Exclusive, Binding: GPUAligned, NCCL: &no, Selectors: Selectors{Vendors: []string{"15b3"}, LinkLayers: []string{"Ethernet"}}},
		{Name: "dra-vfs", Mode: Exclusive, Frontend: DRA, NCCL: &no, Selectors: Selectors{Vendors: []string{"8086"}, LinkLayers: []string{"InfiniBand"}}},
	}}
	for name, text := range map[string]string{"yaml": yamlText, "json": jsonText} {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
	if err := Default().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}

func TestParseBad(t *testing.T) {
	pool := func(name, mode, sel string) string {
		return "- name: " + name + "\n  mode: " + mode + "\n  selectors: " + sel + "\n"
	}
	// noNCCL is a pool that does not set NCCL's variables, for the cases
	// with two pools that are not about them.
	noNCCL := func(name, mode, sel string) string {
		return "- name: " + name + "\n  mode: " + mode + "\n  nccl: false\n  selectors: " + sel + "\n"
	}
	dra := func(name, sel string, nccl bool) string {
		s := "- name: " + name + "\n  mode: exclusive\n  frontend: dra\n  selectors: " + sel + "\n"
		if !nccl {
			s += "  nccl: false\n"
		}
		return s
	}
	head := "resourcePrefix: rdma.example.com\npools:\n"
	tests := []struct {
		name string
		text string
		want string
	}{
		{"empty file", "", "invalid device plugin config: file is empty"},
		{"unknown field", head + pool("a", "exclusive", "{vendors: [15b3]}") + "  colour: red\n",
			`invalid device plugin config: error unmarshaling JSON: while decoding JSON: json: unknown field "colour"`},
		{"unknown selector", head + pool("a", "exclusive", "{vendor: [15b3]}"),
			`invalid device plugin config: error unmarshaling JSON: while decoding JSON: json: unknown field "vendor"`},
		{"no pools", "resourcePrefix: rdma.example.com\n", "pools: at least one pool is required"},
		{"empty selectors", head + pool("a", "exclusive", "{}"),
			"pools[0].selectors: at least one selector is required (to take every device, use kinds: [PF, VF, SF, virtual])"},
		{"missing prefix", "pools:\n" + pool("a", "exclusive", "{vendors: [15b3]}"),
			"resourcePrefix: is required (a DNS subdomain such as rdma.example.com)"},
		{"upper-case prefix", "resourcePrefix: RDMA.example.com\npools:\n" + pool("a", "exclusive", "{vendors: [15b3]}"),
			`resourcePrefix: "RDMA.example.com" is not a DNS subdomain (lower-case letters, digits, '-' and '.')`},
		{"prefix with slash", "resourcePrefix: example.com/rdma\npools:\n" + pool("a", "exclusive", "{vendors: [15b3]}"),
			`resourcePrefix: "example.com/rdma" is not a DNS subdomain (lower-case letters, digits, '-' and '.')`},
		{"kubernetes.io prefix", "resourcePrefix: rdma.kubernetes.io\npools:\n" + pool("a", "exclusive", "{vendors: [15b3]}"),
			`resourcePrefix: "rdma.kubernetes.io" is reserved for Kubernetes; the kubelet does not accept device plugin resources in it`},
		{"pool name with slash", head + pool("a/b", "exclusive", "{vendors: [15b3]}"),
			`pools[0].name: "a/b" must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or the kubelet rejects the resource name`},
		{"pool name ends with dash", head + pool("hca-", "exclusive", "{vendors: [15b3]}"),
			`pools[0].name: "hca-" must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or the kubelet rejects the resource name`},
		{"pool name too long", head + pool("a123456789012345678901234567890123456789012345678901234567890123", "exclusive", "{vendors: [15b3]}"),
			`pools[0].name: "a123456789012345678901234567890123456789012345678901234567890123" is longer than 63 characters, the kubelet rejects the resource name`},
		{"duplicate pool", head + pool("a", "exclusive", "{linkLayers: [Ethernet]}") + noNCCL("a", "exclusive", "{linkLayers: [InfiniBand]}"),
			`pools[1].name: "a" is also the name of pools[0]`},
		{"same env name", head + pool("a-b", "shared", "{linkLayers: [Ethernet]}") + noNCCL("a.b", "shared", "{linkLayers: [InfiniBand]}"),
			`pools[1].name: "a.b" gives the same environment variable prefix A_B as pools[0]`},
		{"bad mode", head + pool("a", "partial", "{vendors: [15b3]}"), `pools[0].mode: "partial" is not exclusive or shared`},
		{"slots on exclusive", head + "- name: a\n  mode: exclusive\n  slots: 4\n  selectors: {vendors: [15b3]}\n",
			"pools[0].slots: is only valid for a shared pool"},
		{"bad vendor", head + pool("a", "exclusive", "{vendors: [mellanox]}"),
			`pools[0].selectors.vendors[0]: "mellanox" is not a 4-digit hex PCI ID such as 15b3`},
		{"bad link layer", head + pool("a", "exclusive", "{linkLayers: [RoCE]}"),
			`pools[0].selectors.linkLayers[0]: "RoCE" is not InfiniBand or Ethernet`},
		{"bad kind", head + pool("a", "exclusive", "{kinds: [pf]}"), `pools[0].selectors.kinds[0]: "pf" is not PF, VF, SF or virtual`},
		{"bad pci address", head + pool("a", "exclusive", "{pciAddresses: [3b:00.0]}"),
			`pools[0].selectors.pciAddresses[0]: "3b:00.0" is not a PCI address such as 0000:18:00.0`},
		{"pfNames without VF", head + pool("a", "exclusive", "{kinds: [PF], pfNames: [ens1f0]}"),
			"pools[0].selectors.pfNames: selects VFs but kinds does not include VF, so the pool is always empty"},
		{"overlapping exclusive pools", head + pool("ib", "exclusive", "{vendors: [15b3]}") + noNCCL("all-ib", "exclusive", "{linkLayers: [InfiniBand]}"),
			`pools[1].selectors: exclusive pool "all-ib" may select the same devices as exclusive pool "ib" (pools[0]); give both a selector field with no value in common`},
		{"overlapping exclusive pools, shared value", head + pool("a", "exclusive", "{rdmaDevices: [mlx5_0, mlx5_1]}") + noNCCL("b", "exclusive", "{rdmaDevices: [mlx5_1]}"),
			`pools[1].selectors: exclusive pool "b" may select the same devices as exclusive pool "a" (pools[0]); give both a selector field with no value in common`},
		{"gpuAligned on a shared pool", head + "- name: a\n  mode: shared\n  binding: gpuAligned\n  selectors: {vendors: [15b3]}\n",
			"pools[0].binding: gpuAligned is only valid for an exclusive pool: every pod of a shared pool gets all of its devices, there is nothing to bind"},
		{"unknown binding", head + "- name: a\n  mode: exclusive\n  binding: numa\n  selectors: {vendors: [15b3]}\n",
			`pools[0].binding: "numa" is not gpuAligned (or empty)`},
		{"unknown frontend", head + "- name: a\n  mode: exclusive\n  frontend: both\n  selectors: {vendors: [15b3]}\n",
			`pools[0].frontend: "both" is not devicePlugin or dra: a pool is served by exactly one front end`},
		{"shared dra pool with too many shares", head + "- name: a\n  mode: shared\n  frontend: dra\n  slots: 10001\n  selectors: {vendors: [15b3]}\n",
			"pools[0].slots: 10001 is out of range 0..10000"},
		{"shared dra pool overlapping a shared pool", head + noNCCL("roce", "shared", "{linkLayers: [Ethernet]}") +
			"- name: nics\n  mode: shared\n  frontend: dra\n  nccl: false\n  selectors: {vendors: [15b3]}\n",
			`pools[1].selectors: pool "nics" may select the same devices as pool "roce" (pools[0]), and one of them has frontend dra: a device is served by exactly one front end; give both a selector field with no value in common`},
		{"dra with gpuAligned", head + "- name: a\n  mode: exclusive\n  frontend: dra\n  binding: gpuAligned\n  selectors: {vendors: [15b3]}\n",
			"pools[0].frontend: dra and binding gpuAligned do not go together: with DRA the scheduler aligns NICs and GPUs (matchAttribute on resource.kubernetes.io/pcieRoot or kube-rdma.io/pcieSwitch)"},
		{"dra pool overlapping a shared pool", head + noNCCL("roce", "shared", "{linkLayers: [Ethernet]}") + dra("nics", "{vendors: [15b3]}", true),
			`pools[1].selectors: pool "nics" may select the same devices as pool "roce" (pools[0]), and one of them has frontend dra: a device is served by exactly one front end; give both a selector field with no value in common`},
		{"binding with wrong case", head + "- name: a\n  mode: exclusive\n  binding: GPUAligned\n  selectors: {vendors: [15b3]}\n",
			`pools[0].binding: "GPUAligned" is not gpuAligned (or empty)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.text))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: got %v, want an error wrapping ErrInvalid", err)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("message (-want +got)\n%s", diff)
			}
		})
	}
}

// TestNCCLConflicts: two or more NCCL pools load (a configuration an earlier
// release accepted), and are reported where more than one has devices.
func TestNCCLConflicts(t *testing.T) {
	text := `resourcePrefix: rdma.example.com
pools:
- name: rail0
  mode: exclusive
  selectors: {rdmaDevices: [mlx5_0]}
- name: rail1
  mode: exclusive
  frontend: dra
  selectors: {rdmaDevices: [mlx5_1]}
- name: roce
  mode: exclusive
  nccl: true
  selectors: {rdmaDevices: [mlx5_4]}
- name: storage
  mode: shared
  nccl: false
  selectors: {rdmaDevices: [mlx5_9]}
`
	c, err := Parse([]byte(text))
	if err != nil {
		t.Fatalf("Parse: %v; want three NCCL pools accepted", err)
	}
	on := func(names ...string) func(Pool) bool {
		return func(p Pool) bool { return slices.Contains(names, p.Name) }
	}
	want := `pools "rail0", "rail1" all set NCCL's variables (nccl is true unless set to false) and have devices on this node: ` +
		`a container with devices of two of them gets one pool's NCCL_IB_HCA (each pool names its own devices and the kubelet or the runtime ` +
		`keeps one value per variable; only the NRI plugin, when on and connected as the container is created, sets values naming all of them), so NCCL uses only that pool's NICs. Fix: select the NICs NCCL uses (every rail) in one pool, ` +
		`and set nccl: false on pools that are not NCCL's fabric (a storage or front-end network)`
	for _, tc := range []struct {
		served []string
		want   []string
	}{
		{[]string{"rail0", "rail1"}, []string{want}},
		{[]string{"rail0", "rail1", "storage"}, []string{want}}, // storage sets none
		{[]string{"roce", "storage"}, nil},                      // a RoCE node: one NCCL pool
		{[]string{"rail0"}, nil},                                // an InfiniBand node with one rail
		{nil, nil},                                              // nothing on the node
		{[]string{"rail0", "rail1", "roce"}, []string{strings.Replace(want, `"rail1"`, `"rail1", "roce"`, 1)}}, // all three named
	} {
		if diff := cmp.Diff(tc.want, c.NCCLConflicts(on(tc.served...))); diff != "" {
			t.Errorf("served %v (-want +got)\n%s", tc.served, diff)
		}
	}
}

func TestParseFieldError(t *testing.T) {
	_, err := Parse([]byte("resourcePrefix: x.io\npools:\n- name: a\n  mode: shared\n  selectors: {kinds: [PF]}\n  slots: -1\n"))
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("got %v, want a *FieldError", err)
	}
	if diff := cmp.Diff("pools[0].slots", fe.Field); diff != "" {
		t.Errorf("field (-want +got)\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if _, _, err := Load(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing file: got %v, want fs.ErrNotExist", err)
	}
	if c, data, err := Load(""); err != nil || data != nil || !cmp.Equal(c, Default()) {
		t.Errorf("Load(\"\") = %v, %q, %v; want Default", c, data, err)
	}
	bad := []byte("pools: []\n")
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, data, err := Load(p); !errors.Is(err, ErrInvalid) || string(data) != string(bad) {
		t.Errorf("Load of a bad file = %q, %v; want its data and ErrInvalid", data, err)
	}
	if err := os.WriteFile(p, []byte("resourcePrefix: x.io\npools: [{name: a, mode: shared, selectors: {kinds: [PF]}}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ResourceName(c.Pools[0]); got != "x.io/a" {
		t.Errorf("ResourceName = %q, want x.io/a", got)
	}
}

func dev(name string, kind discovery.DeviceKind, pci, physfn, ll string, netdevs ...string) discovery.RDMADevice {
	return discovery.RDMADevice{Name: name, Kind: kind, PCIAddress: pci, PhysFn: physfn, LinkLayer: ll,
		Vendor: "15b3", Device: "1021", Driver: "mlx5_core", Netdevs: netdevs}
}

func TestAssign(t *testing.T) {
	devs := []discovery.RDMADevice{
		dev("mlx5_0", discovery.KindPF, "0000:18:00.0", "", "InfiniBand", "ibp24s0"),
		dev("mlx5_1", discovery.KindPF, "0000:3b:00.0", "", "Ethernet", "ens1f0"),
		dev("mlx5_2", discovery.KindVF, "0000:3b:00.2", "0000:3b:00.0", "Ethernet", "ens1f0v0"),
		dev("mlx5_3", discovery.KindVF, "0000:3b:00.3", "0000:3b:00.0", "Ethernet", "ens1f0v1"),
		{Name: "rxe0", Kind: discovery.KindVirtual, LinkLayer: "Ethernet", Netdevs: []string{"eth0"}},
	}
	names := func(m map[string][]discovery.RDMADevice) map[string][]string {
		out := map[string][]string{}
		for k, v := range m {
			out[k] = []string{}
			for _, d := range v {
				out[k] = append(out[k], d.Name)
			}
		}
		return out
	}
	tests := []struct {
		name    string
		pools   []Pool
		want    map[string][]string
		overlap bool
	}{
		{"default takes all", Default().Pools, map[string][]string{"hca": {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "rxe0"}}, false},
		{"pf name by netdev", []Pool{{Name: "v", Mode: Exclusive, Selectors: Selectors{PFNames: []string{"ens1f0"}}}},
			map[string][]string{"v": {"mlx5_2", "mlx5_3"}}, false},
		{"pf name by pci, and by rdma name", []Pool{
			{Name: "a", Mode: Shared, Selectors: Selectors{PFNames: []string{"0000:3B:00.0"}}},
			{Name: "b", Mode: Shared, Selectors: Selectors{PFNames: []string{"mlx5_1"}, Netdevs: []string{"ens1f0v1"}}}},
			map[string][]string{"a": {"mlx5_2", "mlx5_3"}, "b": {"mlx5_3"}}, false},
		{"and across fields, or within", []Pool{{Name: "x", Mode: Exclusive, Selectors: Selectors{
			LinkLayers: []string{"Ethernet"}, Kinds: []string{"PF", "virtual"}}}},
			map[string][]string{"x": {"mlx5_1", "rxe0"}}, false},
		{"ids and addresses", []Pool{{Name: "x", Mode: Exclusive, Selectors: Selectors{
			Vendors: []string{"15B3"}, DeviceIDs: []string{"0x1021"}, Drivers: []string{"mlx5_core"},
			PCIAddresses: []string{"0000:18:00.0", "0000:3b:00.2"}}}},
			map[string][]string{"x": {"mlx5_0", "mlx5_2"}}, false},
		{"shared pools may overlap", []Pool{
			{Name: "a", Mode: Shared, Selectors: Selectors{LinkLayers: []string{"Ethernet"}}},
			{Name: "b", Mode: Shared, Selectors: Selectors{Kinds: []string{"VF"}}}},
			map[string][]string{"a": {"mlx5_1", "mlx5_2", "mlx5_3", "rxe0"}, "b": {"mlx5_2", "mlx5_3"}}, false},
		{"exclusive overlap at run time", []Pool{
			{Name: "a", Mode: Exclusive, Selectors: Selectors{Netdevs: []string{"ens1f0v0"}}},
			{Name: "b", Mode: Exclusive, Selectors: Selectors{Kinds: []string{"VF"}}}},
			map[string][]string{"a": {"mlx5_2"}, "b": {"mlx5_3"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{ResourcePrefix: "x.io", Pools: tt.pools}
			got, err := c.Assign(devs)
			if got, want := errors.Is(err, ErrOverlap), tt.overlap; got != want {
				t.Errorf("errors.Is(%v, ErrOverlap) = %v, want %v", err, got, want)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

// TestSharedDRAPool: a shared pool of frontend dra is accepted (it was
// refused before the DRA front end published consumable capacity); its
// slots are the claims a device takes at once.
func TestSharedDRAPool(t *testing.T) {
	tests := []struct {
		name, text string
		want       int
	}{
		{"slots given", "resourcePrefix: x.io\npools:\n- {name: roce, mode: shared, frontend: dra, slots: 3, selectors: {linkLayers: [Ethernet]}}\n", 3},
		{"slots default", "resourcePrefix: x.io\npools:\n- {name: roce, mode: shared, frontend: dra, selectors: {linkLayers: [Ethernet]}}\n", DefaultSlots},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			p := c.Pools[0]
			if !p.DRA() || p.Mode != Shared || p.SlotCount() != tt.want {
				t.Errorf("pool %+v: DRA %v, mode %s, slots %d; want a shared dra pool of %d", p, p.DRA(), p.Mode, p.SlotCount(), tt.want)
			}
		})
	}
}

// TestNCCLPoolsAccepted: the configurations with several pools that the
// NCCL check must let through.
func TestNCCLPoolsAccepted(t *testing.T) {
	head := "resourcePrefix: rdma.example.com\npools:\n"
	tests := map[string]string{
		"one NCCL pool beside pools that are not": head +
			"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand]}}\n" +
			"- {name: vf, mode: exclusive, nccl: false, selectors: {kinds: [VF], linkLayers: [Ethernet]}}\n" +
			"- {name: roce-shared, mode: shared, nccl: false, selectors: {kinds: [PF], linkLayers: [Ethernet]}}\n",
		"a device plugin pool that is not NCCL's beside an NCCL dra pool": head +
			"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n" +
			"- {name: roce, mode: shared, nccl: false, selectors: {linkLayers: [Ethernet]}}\n",
		"an NCCL dra pool beside a dra pool that is not": head +
			"- {name: ib, mode: exclusive, frontend: dra, selectors: {linkLayers: [InfiniBand]}}\n" +
			"- {name: vf, mode: exclusive, frontend: dra, nccl: false, selectors: {linkLayers: [Ethernet]}}\n",
	}
	for name, text := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse([]byte(text)); err != nil {
				t.Error(err)
			}
		})
	}
}
