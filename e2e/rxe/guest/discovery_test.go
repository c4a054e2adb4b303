//go:build rxe_guest

package guest

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// TestDiscoveryMatchesRdmaTools runs pkg/discovery on the guest's real /sys
// and checks it against what iproute2's rdma tool and ibverbs' ibv_devinfo
// report for real soft-RoCE devices: device names and GUIDs, port state and
// physical state, the netdev, the RoCE v2 GID indexes and GID values, and
// that every /dev/infiniband node discovery names is the char device the
// kernel registered for that RDMA device.
func TestDiscoveryMatchesRdmaTools(t *testing.T) {
	requireGuest(t)
	a, b := rxePair(t, "dsc", "198.51.100", true) // a in the root netns, b in netns dscB

	node, err := discovery.Scanner{SysRoot: "/sys", ProcRoot: "/proc"}.Scan()
	if err != nil {
		t.Fatalf("discovery on the guest's /sys: %v", err)
	}
	if len(node.Warnings) > 0 {
		t.Errorf("discovery warnings: %q", node.Warnings)
	}
	got := map[string]discovery.RDMADevice{}
	for _, d := range node.RDMADevices {
		got[d.Name] = d
	}

	var devs []struct {
		Name     string `json:"ifname"`
		NodeGUID string `json:"node_guid"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "rdma", "-j", "dev", "show")), &devs); err != nil {
		t.Fatalf("rdma -j dev show: %v", err)
	}
	var names []string
	for _, d := range devs {
		names = append(names, d.Name)
		if g, ok := got[d.Name]; !ok {
			t.Errorf("rdma lists %s, discovery does not", d.Name)
		} else if g.NodeGUID != strings.ToLower(d.NodeGUID) {
			t.Errorf("%s node GUID: discovery %q, rdma %q", d.Name, g.NodeGUID, d.NodeGUID)
		}
	}
	if len(devs) != len(node.RDMADevices) {
		t.Errorf("rdma lists %v, discovery %d devices", names, len(node.RDMADevices))
	}
	for _, e := range []endpoint{a, b} {
		if !slices.Contains(names, e.RXE) {
			t.Fatalf("rdma does not list %s (%v)", e.RXE, names)
		}
	}

	var links []struct {
		Dev       string `json:"ifname"`
		Port      int    `json:"port"`
		State     string `json:"state"`
		PhysState string `json:"physical_state"`
		Netdev    string `json:"netdev"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, "", "rdma", "-j", "link", "show")), &links); err != nil {
		t.Fatalf("rdma -j link show: %v", err)
	}
	for _, l := range links {
		d := got[l.Dev]
		if l.Port < 1 || l.Port > len(d.Ports) {
			t.Errorf("%s/%d: discovery has ports %v", l.Dev, l.Port, d.Ports)
			continue
		}
		p := d.Ports[l.Port-1]
		if p.State != l.State {
			t.Errorf("%s/%d state: discovery %q, rdma %q", l.Dev, l.Port, p.State, l.State)
		}
		// rdma says LINK_UP where sysfs says "5: LinkUp".
		if norm(p.PhysState) != norm(l.PhysState) {
			t.Errorf("%s/%d phys state: discovery %q, rdma %q", l.Dev, l.Port, p.PhysState, l.PhysState)
		}
		// rdma names the netdev only when it is in the caller's netns.
		if l.Netdev != "" && p.Netdev != l.Netdev {
			t.Errorf("%s/%d netdev: discovery %q, rdma %q", l.Dev, l.Port, p.Netdev, l.Netdev)
		}
	}

	ra := got[a.RXE]
	if ra.Kind != discovery.KindVirtual || ra.Parent != a.Netdev || !slices.Contains(ra.Netdevs, a.Netdev) ||
		ra.PCIAddress != "" || ra.LinkLayer != "Ethernet" {
		t.Errorf("%s = kind %s parent %q netdevs %v pci %q link %q; want virtual on %s", a.RXE, ra.Kind, ra.Parent,
			ra.Netdevs, ra.PCIAddress, ra.LinkLayer, a.Netdev)
	}
	for _, e := range []endpoint{a, b} {
		checkGIDs(t, got[e.RXE], e)
		checkCharDevices(t, got[e.RXE])
	}
}

func norm(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// ibv_devinfo -v prints "GID[  1]:   ::ffff:198.51.100.1, RoCE v2": compressed
// IPv6 text, then the type.
var gidLine = regexp.MustCompile(`GID\[\s*(\d+)\]:\s*([^\s,]+)(?:,\s*([^\n]+))?`)

// checkGIDs compares discovery's GID table with ibv_devinfo -v's.
func checkGIDs(t *testing.T, d discovery.RDMADevice, e endpoint) {
	t.Helper()
	out := mustRun(t, "", "ibv_devinfo", "-v", "-d", d.Name)
	want := map[int]string{}
	var v2 []int
	for _, m := range gidLine.FindAllStringSubmatch(out, -1) {
		i, _ := strconv.Atoi(m[1])
		want[i] = m[2]
		if strings.TrimSpace(m[3]) == "RoCE v2" {
			v2 = append(v2, i)
		}
	}
	if len(want) == 0 {
		t.Fatalf("ibv_devinfo -v -d %s printed no GIDs:\n%s", d.Name, out)
	}
	slices.Sort(v2)
	if len(d.Ports) == 0 {
		t.Fatalf("%s: discovery has no ports", d.Name)
	}
	p := d.Ports[0]
	if !slices.Equal(p.RoCEv2GIDIndexes, v2) {
		t.Errorf("%s RoCE v2 GID indexes: discovery %v, ibv_devinfo %v", d.Name, p.RoCEv2GIDIndexes, v2)
	}
	if !slices.Contains(p.RoCEv2GIDIndexes, e.GID) {
		t.Errorf("%s: discovery lacks the RoCE v2 GID %d of %s", d.Name, e.GID, e.IP)
	}
	for _, g := range p.GIDs {
		w, ok := want[g.Index]
		if !ok {
			t.Errorf("%s GID %d: discovery has %s, ibv_devinfo none", d.Name, g.Index, g.GID)
			continue
		}
		gi, err := parseGID(g.GID)
		wi := net.ParseIP(w)
		if err != nil || wi == nil || !gi.Equal(wi) {
			t.Errorf("%s GID %d: discovery %s, ibv_devinfo %s", d.Name, g.Index, g.GID, w)
		}
	}
	if len(p.GIDs) != len(want) {
		t.Errorf("%s: discovery has %d GIDs, ibv_devinfo %d", d.Name, len(p.GIDs), len(want))
	}
}

// checkCharDevices checks that each /dev/infiniband node discovery names is a
// char device whose major:minor is the one sysfs gives for that RDMA device.
func checkCharDevices(t *testing.T, d discovery.RDMADevice) {
	t.Helper()
	if len(d.CharDevices) == 0 || !strings.HasPrefix(filepath.Base(d.CharDevices[0]), "uverbs") {
		t.Fatalf("%s char devices = %v, want a uverbs node first", d.Name, d.CharDevices)
	}
	for _, p := range d.CharDevices {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Errorf("%s: %s: %v", d.Name, p, err)
			continue
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
			t.Errorf("%s: %s is not a char device", d.Name, p)
		}
		class := "infiniband_verbs"
		if !strings.HasPrefix(filepath.Base(p), "uverbs") {
			class = "infiniband_mad"
		}
		sys := filepath.Join("/sys/class", class, filepath.Base(p))
		ib, err := os.ReadFile(filepath.Join(sys, "ibdev"))
		if err != nil || strings.TrimSpace(string(ib)) != d.Name {
			t.Errorf("%s: %s/ibdev = %q, %v", d.Name, sys, ib, err)
		}
		dev, err := os.ReadFile(filepath.Join(sys, "dev"))
		want := fmt.Sprintf("%d:%d", st.Rdev>>8&0xfff, st.Rdev&0xff|st.Rdev>>12&0xfff00)
		if err != nil || strings.TrimSpace(string(dev)) != want {
			t.Errorf("%s: %s is %s, sysfs says %q (%v)", d.Name, p, want, dev, err)
		}
	}
}
