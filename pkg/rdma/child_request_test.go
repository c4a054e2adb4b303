package rdma

import (
	"net"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// request is an RTM_NEWLINK as the kernel reads it: the ifinfomsg's flags
// and the attributes, nested ones by path ("linkinfo/data/1").
type request struct {
	Type, Flags      uint16
	IfiFlags, Change uint32
	Attrs            map[string][]byte
}

func decodeRequest(t *testing.T, req *nl.NetlinkRequest) request {
	t.Helper()
	b := req.Serialize()
	got := request{
		Type:  nl.NativeEndian().Uint16(b[4:6]),
		Flags: nl.NativeEndian().Uint16(b[6:8]),
		Attrs: map[string][]byte{},
	}
	ifi := nl.DeserializeIfInfomsg(b[unix.NLMSG_HDRLEN:])
	got.IfiFlags, got.Change = ifi.Flags, ifi.Change
	attrs, err := nl.ParseRouteAttr(b[unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg:])
	if err != nil {
		t.Fatal(err)
	}
	walk(t, "", attrs, got.Attrs)
	return got
}

var attrNames = map[uint16]string{
	unix.IFLA_LINK: "link", unix.IFLA_IFNAME: "ifname", unix.IFLA_NET_NS_FD: "netns_fd",
	unix.IFLA_MTU: "mtu", unix.IFLA_ADDRESS: "address", unix.IFLA_LINKINFO: "linkinfo",
}

func walk(t *testing.T, prefix string, attrs []syscall.NetlinkRouteAttr, out map[string][]byte) {
	t.Helper()
	for _, a := range attrs {
		name := attrNames[a.Attr.Type]
		switch {
		case prefix == "linkinfo/" && a.Attr.Type == nl.IFLA_INFO_KIND:
			name = "kind"
		case prefix == "linkinfo/" && a.Attr.Type == nl.IFLA_INFO_DATA:
			name = "data"
		case prefix == "linkinfo/data/":
			name = string(rune('0' + a.Attr.Type))
		}
		if name == "" {
			t.Fatalf("unexpected attribute %d under %q", a.Attr.Type, prefix)
		}
		if name == "linkinfo" || name == "data" {
			nested, err := nl.ParseRouteAttr(a.Value)
			if err != nil {
				t.Fatal(err)
			}
			walk(t, prefix+name+"/", nested, out)
			continue
		}
		out[prefix+name] = a.Value
	}
}

func u16(v uint16) []byte { return nl.Uint16Attr(v) }
func u32(v uint32) []byte { return nl.Uint32Attr(v) }

// TestChildRequest checks the RTM_NEWLINK of each child kind byte for byte,
// as the kernel parses it. The macvlan one is also sent to this kernel
// (TestAddChildMacvlan); this host's kernel has neither ipvlan ("Unknown
// device type") nor IPoIB (no InfiniBand HCA, no ib_ipoib), so for those two
// this is the test: the attributes are the kernel's (include/uapi/linux/
// if_link.h: IFLA_IPVLAN_MODE=1 u16, IFLA_IPVLAN_FLAGS=2 u16;
// IFLA_IPOIB_PKEY=1, IFLA_IPOIB_MODE=2, IFLA_IPOIB_UMCAST=3, all u16), and
// ipoib_new_child_link() reads IFLA_LINK in the sender's namespace as
// rtnl_newlink does for every kind.
func TestChildRequest(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:07")
	common := func(name string) map[string][]byte {
		return map[string][]byte{
			"link": u32(5), "ifname": append([]byte(name), 0), "netns_fd": u32(9),
		}
	}
	with := func(m map[string][]byte, kv ...any) map[string][]byte {
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].([]byte)
		}
		return m
	}
	for _, tc := range []struct {
		name string
		c    ChildConfig
		want map[string][]byte
	}{
		{"macvlan bridge, mtu and mac", ChildConfig{Kind: ChildMacvlan, Name: "net1", MTU: 1400, MAC: mac},
			with(common("net1"), "mtu", u32(1400), "address", []byte(mac), "linkinfo/kind", []byte("macvlan"),
				"linkinfo/data/1", u32(4))},
		{"ipvlan l2 bridge", ChildConfig{Kind: ChildIPVLAN, Name: "net1"},
			with(common("net1"), "linkinfo/kind", []byte("ipvlan"), "linkinfo/data/1", u16(0), "linkinfo/data/2", u16(0))},
		{"ipoib in the parent's partition", ChildConfig{Kind: ChildIPoIB, Name: "ib1", PKey: 0x8001},
			with(common("ib1"), "linkinfo/kind", []byte("ipoib"), "linkinfo/data/1", u16(0x8001),
				"linkinfo/data/2", u16(0), "linkinfo/data/3", u16(0))},
		{"ipoib, the kernel's pkey", ChildConfig{Kind: ChildIPoIB, Name: "ib1"},
			with(common("ib1"), "linkinfo/kind", []byte("ipoib"), "linkinfo/data/2", u16(0), "linkinfo/data/3", u16(0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := childRequest(5, 9, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			got := decodeRequest(t, req)
			want := request{Type: unix.RTM_NEWLINK, Flags: unix.NLM_F_REQUEST | unix.NLM_F_CREATE | unix.NLM_F_EXCL | unix.NLM_F_ACK,
				IfiFlags: unix.IFF_UP, Change: unix.IFF_UP, Attrs: tc.want}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChildRequestRefuses(t *testing.T) {
	mac, _ := net.ParseMAC("02:00:00:00:00:07")
	for _, c := range []ChildConfig{
		{Kind: ChildIPVLAN, Name: "net1", MAC: mac},
		{Kind: ChildIPoIB, Name: "ib1", MAC: mac},
		{Kind: "vlan", Name: "net1"},
	} {
		if _, err := childRequest(5, 9, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
