package discovery

import "testing"

func TestRoCEv2GIDIndex(t *testing.T) {
	v1 := GID{Index: 0, GID: "fe80:0000:0000:0000:0000:0000:0000:0001", Type: "IB/RoCE v1"}
	v2link := GID{Index: 1, GID: "fe80:0000:0000:0000:0000:0000:0000:0001", Type: "RoCE v2"}
	v2ipv4 := GID{Index: 3, GID: "0000:0000:0000:0000:0000:ffff:0a00:020f", Type: "RoCE v2"}
	tests := []struct {
		name   string
		port   Port
		want   int
		wantOK bool
	}{
		{"IPv4-mapped RoCE v2 wins over an earlier v2", Port{GIDs: []GID{v1, v2link, v2ipv4}}, 3, true},
		{"first RoCE v2 without IPv4", Port{GIDs: []GID{v1, v2link}}, 1, true},
		{"only RoCE v1", Port{GIDs: []GID{v1}}, 0, false},
		{"indexes without the table", Port{RoCEv2GIDIndexes: []int{5, 7}}, 5, true},
		{"nothing", Port{}, 0, false},
	}
	for _, tt := range tests {
		got, ok := RoCEv2GIDIndex(tt.port)
		if ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("%s: RoCEv2GIDIndex = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}

	eth := func(g ...GID) RDMADevice { return RDMADevice{Ports: []Port{{LinkLayer: "Ethernet", GIDs: g}}} }
	ib := RDMADevice{Ports: []Port{{LinkLayer: "InfiniBand"}}}
	common := []struct {
		name   string
		devs   []RDMADevice
		want   int
		wantOK bool
	}{
		{"two ports agree", []RDMADevice{eth(v1, v2link, v2ipv4), eth(v2ipv4)}, 3, true},
		{"two ports disagree", []RDMADevice{eth(v1, v2link, v2ipv4), eth(v2link)}, 0, false},
		{"an InfiniBand port", []RDMADevice{eth(v2ipv4), ib}, 0, false},
		{"a port without RoCE v2", []RDMADevice{eth(v2ipv4), eth(v1)}, 0, false},
		{"no devices", nil, 0, false},
	}
	for _, tt := range common {
		got, ok := CommonRoCEv2GIDIndex(tt.devs)
		if ok != tt.wantOK || ok && got != tt.want {
			t.Errorf("%s: CommonRoCEv2GIDIndex = %d, %v; want %d, %v", tt.name, got, ok, tt.want, tt.wantOK)
		}
	}
}
