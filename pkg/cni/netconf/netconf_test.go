package netconf

import (
	"errors"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParse(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	for _, tc := range []struct {
		name    string
		in      string
		node    Node
		want    *Conf
		wantErr error
	}{
		{
			name: "multus with runtimeConfig",
			in: `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","ipam":{"type":"host-local","ranges":[]},
				"mtu":9000,"runtimeConfig":{"deviceID":"rxe0","mac":"02:00:00:00:00:01"}}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", IPAMType: "host-local", DeviceID: "rxe0", MTU: 9000, MAC: mac,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{
			name: "top-level deviceID as multus writes it, standard fields accepted",
			in: `{"cniVersion":"0.4.0","name":"rdma","type":"kube-rdma","deviceID":"0000:3b:00.0","dns":{},"args":{"cni":{}},
				"capabilities":{"mac":true},"rdmaNetnsMode":"exclusive","stateDir":"/tmp/s"}`,
			node: Node{StateDir: "/tmp/s"},
			want: &Conf{RequirePodResources: true, CNIVersion: "0.4.0", Name: "rdma", DeviceID: "0000:3b:00.0",
				KubeletSocket: DefaultKubeletSocket, StateDir: "/tmp/s", SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeExclusive, SharedNetdev: SharedNone},
		},
		{
			name: "deviceID and pciBusID as Multus writes them into a delegate",
			in:   `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","deviceID":"0000:1c:00.1","pciBusID":"0000:1c:00.1"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.0.0", Name: "rdma", DeviceID: "0000:1c:00.1",
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{
			name: "pciBusID alone names the device",
			in:   `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","pciBusID":"0000:1c:00.1"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.0.0", Name: "rdma", DeviceID: "0000:1c:00.1",
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{name: "pciBusID not deviceID", in: `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","deviceID":"mlx5_0","pciBusID":"0000:1c:00.1"}`, wantErr: ErrInvalid},
		{
			name: "standalone",
			in: `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","resourceName":"rdma.kube-rdma.io/hca","interfaceNames":["ib0","ib1"],
				"requirePodResources":true}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.0.0", Name: "rdma", ResourceName: "rdma.kube-rdma.io/hca", InterfaceNames: []string{"ib0", "ib1"},
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{
			name: "dra",
			in:   `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","draClaimsDir":"/var/lib/kubelet/plugins/rdma.kube-rdma.io/claims"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.0.0", Name: "rdma", DRAClaimsDir: "/var/lib/kubelet/plugins/rdma.kube-rdma.io/claims",
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{name: "dra with resourceName", in: `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","draClaimsDir":"/c","resourceName":"r/x"}`, wantErr: ErrInvalid},
		{name: "dra with deviceID", in: `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","draClaimsDir":"/c","runtimeConfig":{"deviceID":"mlx5_0"}}`, wantErr: ErrInvalid},
		{name: "dra dir relative", in: `{"cniVersion":"1.0.0","name":"rdma","type":"kube-rdma","draClaimsDir":"claims"}`, wantErr: ErrInvalid},
		{
			name: "runtimeConfig.mac wins over mac; runtimeConfig.ips is for the IPAM plugin",
			in: `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","mac":"02:00:00:00:00:09",
				"runtimeConfig":{"deviceID":"rxe0","mac":"02:00:00:00:00:01","ips":["10.1.0.5/24"]}}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", DeviceID: "rxe0", MAC: mac,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{name: "malformed json", in: `{"cniVersion":`, wantErr: ErrDecode},
		{name: "not an object", in: `[1]`, wantErr: ErrDecode},
		{name: "wrong field type", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","mtu":"9000"}`, wantErr: ErrInvalid},
		{name: "unknown field", in: `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","master":"eth0"}`, wantErr: ErrInvalid},
		{name: "unknown runtimeConfig field", in: `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","runtimeConfig":{"foo":1}}`, wantErr: ErrInvalid},
		{name: "wrong type", in: `{"cniVersion":"1.1.0","name":"rdma","type":"host-device"}`, wantErr: ErrInvalid},
		{name: "no name", in: `{"cniVersion":"1.1.0","type":"kube-rdma"}`, wantErr: ErrInvalid},
		{name: "bad mac", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","mac":"zz"}`, wantErr: ErrInvalid},
		{name: "multicast mac", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","mac":"01:00:5e:00:00:01"}`, wantErr: ErrInvalid},
		{name: "mtu", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","mtu":70000}`, wantErr: ErrInvalid},
		{name: "mode", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","rdmaNetnsMode":"private"}`, wantErr: ErrInvalid},
		{
			// The opt-in of this release (the default is none, docs/upgrades.md).
			name: "sharedNetdev macvlan",
			in:   `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","resourceName":"r/shared","sharedNetdev":"macvlan","mac":"02:00:00:00:00:01"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", ResourceName: "r/shared", SharedNetdev: SharedMacvlan, MAC: mac,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto},
		},
		{
			name: "sharedNetdev left out is none in this release",
			in:   `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","resourceName":"r/shared"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", ResourceName: "r/shared", SharedNetdev: SharedNone,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto},
		},
		{
			name: "sharedNetdev ipvlan",
			in:   `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","resourceName":"r/shared","sharedNetdev":"ipvlan"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", ResourceName: "r/shared", SharedNetdev: SharedIPVLAN,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto},
		},
		{
			name: "sharedNetdev none",
			in:   `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","resourceName":"r/shared","sharedNetdev":"none"}`,
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", ResourceName: "r/shared", SharedNetdev: SharedNone,
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, ProcRoot: DefaultProcRoot, AllocDir: DefaultAllocDir, GPUResourceName: DefaultGPUResourceName, NetnsMode: ModeAuto},
		},
		{name: "sharedNetdev unknown", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","sharedNetdev":"vlan"}`, wantErr: ErrInvalid},
		{name: "sharedNetdev ipoib is chosen, not configured", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","sharedNetdev":"ipoib"}`, wantErr: ErrInvalid},
		{name: "sharedNetdev ipvlan with a mac", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","sharedNetdev":"ipvlan","mac":"02:00:00:00:00:01"}`, wantErr: ErrInvalid},
		{
			name: "gpuAligned fields",
			in:   `{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","resourceName":"r/p","allocDir":"/a","procRoot":"/p","gpuResourceName":"amd.com/gpu"}`,
			node: Node{AllocDir: "/a", ProcRoot: "/p"},
			want: &Conf{RequirePodResources: true, CNIVersion: "1.1.0", Name: "rdma", ResourceName: "r/p", AllocDir: "/a", ProcRoot: "/p", GPUResourceName: "amd.com/gpu",
				KubeletSocket: DefaultKubeletSocket, StateDir: DefaultStateDir, SysfsRoot: DefaultSysfsRoot, NetnsMode: ModeAuto, SharedNetdev: SharedNone},
		},
		{name: "relative alloc dir", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","allocDir":"alloc"}`, wantErr: ErrInvalid},
		{name: "relative state dir", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","stateDir":"state"}`, wantErr: ErrInvalid},
		{name: "ipam without type", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","ipam":{}}`, wantErr: ErrInvalid},
		{name: "ipam type with path", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","ipam":{"type":"../x"}}`, wantErr: ErrInvalid},
		{name: "duplicate interface name", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","interfaceNames":["a","a"]}`, wantErr: ErrInvalid},
		{name: "bad interface name", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","interfaceNames":["a/b"]}`, wantErr: ErrInvalid},
		{name: "trailing data", in: `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma"} {}`, wantErr: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in), tc.node)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Parse error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePrevResult(t *testing.T) {
	in := `{"cniVersion":"1.1.0","name":"n","type":"kube-rdma","runtimeConfig":{"deviceID":"rxe0"},
		"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.0.0.2/24","interface":0}]}}`
	c, err := Parse([]byte(in), Node{})
	if err != nil {
		t.Fatal(err)
	}
	if c.PrevResult == nil || len(c.PrevResult.Interfaces) != 1 || c.PrevResult.IPs[0].Address.String() != "10.0.0.2/24" {
		t.Errorf("PrevResult = %+v", c.PrevResult)
	}
}

func TestRequireDevice(t *testing.T) {
	c, err := Parse([]byte(`{"cniVersion":"1.1.0","name":"n","type":"kube-rdma"}`), Node{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RequireDevice(); !errors.Is(err, ErrInvalid) {
		t.Errorf("RequireDevice = %v, want ErrInvalid", err)
	}
}

func TestPlanNames(t *testing.T) {
	for _, tc := range []struct {
		name    string
		conf    Conf
		ifName  string
		devices []string
		want    []Assignment
		wantErr bool
	}{
		{name: "multus", conf: Conf{DeviceID: "mlx5_0"}, ifName: "net3", devices: []string{"mlx5_0"},
			want: []Assignment{{DeviceID: "mlx5_0", IfName: "net3"}}},
		{name: "standalone default names skip the runtime's", conf: Conf{ResourceName: "r"}, ifName: "net1",
			devices: []string{"mlx5_0", "mlx5_1"}, want: []Assignment{{DeviceID: "mlx5_0", IfName: "net2"}, {DeviceID: "mlx5_1", IfName: "net3"}}},
		{name: "standalone configured names", conf: Conf{ResourceName: "r", InterfaceNames: []string{"ib0", "ib1"}}, ifName: "eth0",
			devices: []string{"mlx5_0"}, want: []Assignment{{DeviceID: "mlx5_0", IfName: "ib0"}}},
		{name: "dra names as standalone", conf: Conf{DRAClaimsDir: "/c"}, ifName: "eth0",
			devices: []string{"mlx5_0", "mlx5_1"}, want: []Assignment{{DeviceID: "mlx5_0", IfName: "net1"}, {DeviceID: "mlx5_1", IfName: "net2"}}},
		{name: "too few names", conf: Conf{ResourceName: "r", InterfaceNames: []string{"ib0"}}, ifName: "eth0",
			devices: []string{"mlx5_0", "mlx5_1"}, wantErr: true},
		{name: "configured name is the runtime's", conf: Conf{ResourceName: "r", InterfaceNames: []string{"eth0"}}, ifName: "eth0",
			devices: []string{"mlx5_0"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanNames(&tc.conf, tc.ifName, tc.devices)
			if (err != nil) != tc.wantErr {
				t.Fatalf("PlanNames error = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PlanNames (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSortDevices(t *testing.T) {
	ids := []string{"mlx5_10", "mlx5_2", "0000:3b:00.1", "mlx5_1"}
	SortDevices(ids)
	if diff := cmp.Diff([]string{"0000:3b:00.1", "mlx5_1", "mlx5_2", "mlx5_10"}, ids); diff != "" {
		t.Errorf("SortDevices (-want +got):\n%s", diff)
	}
}

// FuzzParse checks that Parse never panics and that what it accepts is
// consistent: a known mode, absolute paths, a unicast MAC, a sane MTU.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","ipam":{"type":"static"},"mtu":9000,"runtimeConfig":{"deviceID":"rxe0"}}`,
		`{"cniVersion":"1.0.0","name":"r","type":"kube-rdma","resourceName":"x","interfaceNames":["net1"],"mac":"02:00:00:00:00:01"}`,
		`{"cniVersion":"1.1.0","name":"r","type":"kube-rdma","prevResult":{"cniVersion":"1.1.0","interfaces":[]}}`,
		`{}`, `[]`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, Node{})
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrDecode) {
				t.Fatalf("error %v wraps neither ErrInvalid nor ErrDecode", err)
			}
			return
		}
		switch c.NetnsMode {
		case ModeAuto, ModeShared, ModeExclusive:
		default:
			t.Fatalf("accepted mode %q", c.NetnsMode)
		}
		if c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535) {
			t.Fatalf("accepted mtu %d", c.MTU)
		}
		if c.MAC != nil && c.MAC[0]&1 != 0 {
			t.Fatalf("accepted multicast mac %v", c.MAC)
		}
		for _, p := range []string{c.StateDir, c.SysfsRoot, c.KubeletSocket} {
			if p == "" || p[0] != '/' {
				t.Fatalf("accepted path %q", p)
			}
		}
	})
}
