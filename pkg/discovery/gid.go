package discovery

import (
	"strconv"
	"strings"
)

// RoCEv2GIDIndex is the GID index NCCL_IB_GID_INDEX should name for a port:
// its first RoCE v2 GID with an IPv4-mapped address (what RoCE fabrics
// route on), else its first RoCE v2 GID; false when it has none. The device
// plugin's Allocate, the DRA front end, the CNI's GPU-aligned files and the
// node state all name the index this returns.
func RoCEv2GIDIndex(p Port) (int, bool) {
	first := -1
	for _, g := range p.GIDs {
		if g.Type != "RoCE v2" {
			continue
		}
		if strings.HasPrefix(g.GID, "0000:0000:0000:0000:0000:ffff:") {
			return g.Index, true
		}
		if first < 0 {
			first = g.Index
		}
	}
	if first < 0 && len(p.RoCEv2GIDIndexes) > 0 {
		first = p.RoCEv2GIDIndexes[0]
	}
	return first, first >= 0
}

// CommonRoCEv2GIDIndex returns the RoCE v2 GID index every port of the
// devices uses (RoCEv2GIDIndex), when all ports are Ethernet and agree: one
// NCCL_IB_GID_INDEX serves them all only then.
func CommonRoCEv2GIDIndex(devs []RDMADevice) (int, bool) {
	idx, found := -1, false
	for _, d := range devs {
		for _, p := range d.Ports {
			if p.LinkLayer != "Ethernet" {
				return 0, false
			}
			i, ok := RoCEv2GIDIndex(p)
			if !ok || (found && i != idx) {
				return 0, false
			}
			idx, found = i, true
		}
	}
	return idx, found
}

// UCXNetDevices is the value of UCX_NET_DEVICES for devs: every port of
// each device as device:port, in the devices' order, joined by ","; "" when
// no port is known.
func UCXNetDevices(devs []RDMADevice) string {
	var ports []string
	for _, d := range devs {
		for _, p := range d.Ports {
			ports = append(ports, d.Name+":"+strconv.Itoa(p.Port))
		}
	}
	return strings.Join(ports, ",")
}
