package guest

// Pure parsers of what the kernel and the RDMA tools print. This file has no build tag, so
// its unit tests also run on the host with a plain `go test`.

import (
	"bufio"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// parseGID parses a GID as sysfs prints it ("0000:0000:0000:0000:0000:ffff:c000:0201").
func parseGID(s string) (net.IP, error) {
	s = strings.TrimSpace(s)
	groups := strings.Split(s, ":")
	if len(groups) != 8 {
		return nil, fmt.Errorf("parse gid %q: want 8 groups, got %d", s, len(groups))
	}
	ip := make(net.IP, 0, net.IPv6len)
	for _, g := range groups {
		v, err := strconv.ParseUint(g, 16, 16)
		if err != nil || len(g) != 4 {
			return nil, fmt.Errorf("parse gid %q: group %q is not 4 hex digits", s, g)
		}
		ip = append(ip, byte(v>>8), byte(v))
	}
	return ip, nil
}

// parseListenPorts returns the local ports in TCP LISTEN state (st 0A) of a /proc/net/tcp or
// /proc/net/tcp6 file.
func parseListenPorts(content string) (map[int]bool, error) {
	ports := map[int]bool{}
	sc := bufio.NewScanner(strings.NewReader(content))
	first := true
	for sc.Scan() {
		if first { // header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		if f[3] != "0A" {
			continue
		}
		i := strings.LastIndexByte(f[1], ':')
		if i < 0 {
			return nil, fmt.Errorf("parse local address %q", f[1])
		}
		p, err := strconv.ParseUint(f[1][i+1:], 16, 16)
		if err != nil {
			return nil, fmt.Errorf("parse port of %q: %w", f[1], err)
		}
		ports[int(p)] = true
	}
	return ports, sc.Err()
}

// parseWriteBW returns the average bandwidth in MB/s (perftest's MB: 2^20 bytes) of an
// ib_write_bw / ib_send_bw / ib_read_bw report: the row after the header
// " #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]".
func parseWriteBW(out string) (float64, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") || !strings.Contains(l, "BW average[") {
			continue
		}
		// "BW peak[..]" is one column written as two words.
		header := strings.Fields(strings.ReplaceAll(l, "BW ", ""))
		col, unit := -1, ""
		for j, tok := range header {
			if strings.HasPrefix(tok, "average[") {
				col, unit = j, strings.TrimSuffix(strings.TrimPrefix(tok, "average["), "]")
			}
		}
		for _, row := range lines[i+1:] {
			f := strings.Fields(row)
			if len(f) == 0 {
				continue
			}
			if col >= len(f) {
				return 0, fmt.Errorf("bandwidth row %q has no column %d", row, col)
			}
			v, err := strconv.ParseFloat(f[col], 64)
			if err != nil {
				return 0, fmt.Errorf("parse bandwidth %q: %w", f[col], err)
			}
			switch unit {
			case "MB/sec":
				return v, nil
			case "Gb/sec":
				return v * 1e9 / 8 / (1 << 20), nil
			default:
				return 0, fmt.Errorf("unknown bandwidth unit %q", unit)
			}
		}
	}
	return 0, fmt.Errorf("no bandwidth report in output:\n%s", out)
}

// rdmaLinkOnNetdev returns the RDMA device of the `rdma link show` line whose netdev is
// netdev ("link rxe0/1 state ACTIVE physical_state LINK_UP netdev net1" gives rxe0). Run in
// a network namespace, `rdma link show` names only netdevs of that namespace.
func rdmaLinkOnNetdev(out, netdev string) (string, bool) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "link" {
			continue
		}
		for i := 2; i+1 < len(f); i++ {
			if f[i] == "netdev" && f[i+1] == netdev {
				dev, _, _ := strings.Cut(f[1], "/")
				return dev, true
			}
		}
	}
	return "", false
}

// normalizeState drops from one command's output in a host state snapshot what changes
// without anyone changing the host: IPv6 link-local addresses and routes (DAD timing), RDMA
// device indexes, netns ids, and line order.
func normalizeState(cmd []string, out string) string {
	ipAddrOrRoute := len(cmd) > 1 && cmd[0] == "ip" && (slices.Contains(cmd, "addr") || slices.Contains(cmd, "route"))
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case l == "":
			continue
		case ipAddrOrRoute && (strings.Contains(l, "fe80:") || strings.Contains(l, "ff00::/8")):
			continue
		case len(cmd) > 1 && cmd[0] == "rdma" && cmd[1] == "dev":
			if _, rest, ok := strings.Cut(l, ": "); ok {
				l = rest
			}
		case len(cmd) > 1 && cmd[0] == "ip" && cmd[1] == "netns":
			if i := strings.Index(l, " (id: "); i >= 0 {
				l = l[:i]
			}
		}
		keep = append(keep, strings.TrimRight(l, " "))
	}
	sort.Strings(keep)
	return strings.Join(keep, "\n")
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 2, 3}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestDevinfoRoceV2GID(t *testing.T) {
	out := "\t\t\tGID[  0]:\t\tfe80::f841:d8ff:fec2:5a6e, RoCE v2\n\t\t\tGID[  1]:\t\t::ffff:192.0.2.31, RoCE v1\n\t\t\tGID[  2]:\t\t::ffff:192.0.2.31, RoCE v2\n"
	for _, tc := range []struct {
		ip   string
		want int
	}{{"192.0.2.31", 2}, {"192.0.2.32", -1}} {
		if got := devinfoRoceV2GID(out, net.ParseIP(tc.ip)); got != tc.want {
			t.Errorf("devinfoRoceV2GID(%s) = %d, want %d", tc.ip, got, tc.want)
		}
	}
	if !hasGSIQP("link rxe0/1 lqpn 1 type GSI state RTS sq-psn 0 comm [ib_core] \n") || hasGSIQP("link rxe0/1 lqpn 17 type RC state RTS\n") {
		t.Error("hasGSIQP: wrong answer")
	}
}

func TestRdmaLinkOnNetdev(t *testing.T) {
	out := "link rxe1/1 state ACTIVE physical_state LINK_UP netdev cnih1 \nlink rxe0/1 state ACTIVE physical_state LINK_UP netdev net1 \nlink mlx5_0/1 state DOWN physical_state DISABLED \n"
	if dev, ok := rdmaLinkOnNetdev(out, "net1"); !ok || dev != "rxe0" {
		t.Errorf("rdmaLinkOnNetdev(net1) = %q, %v; want rxe0", dev, ok)
	}
	if dev, ok := rdmaLinkOnNetdev(out, "eth0"); ok {
		t.Errorf("rdmaLinkOnNetdev(eth0) = %q, want none", dev)
	}
}

func TestNormalizeState(t *testing.T) {
	tests := []struct {
		cmd         []string
		before, now string
	}{
		{
			cmd:    []string{"ip", "-o", "addr", "show"},
			before: "2: h1    inet6 fe80::1/64 scope link tentative \n1: lo    inet 127.0.0.1/8 scope host lo\n",
			now:    "1: lo    inet 127.0.0.1/8 scope host lo\n2: h1    inet6 fe80::1/64 scope link \n",
		},
		{
			cmd:    []string{"rdma", "dev", "show"},
			before: "0: rxe0: node_type ca node_guid 4458:c0ff:fe09:91c4\n1: rxe1: node_type ca",
			now:    "5: rxe1: node_type ca\n4: rxe0: node_type ca node_guid 4458:c0ff:fe09:91c4\n",
		},
		{
			cmd:    []string{"ip", "netns", "list"},
			before: "podB\npodA\n",
			now:    "podB (id: 1)\npodA (id: 0)\n",
		},
	}
	for _, tc := range tests {
		if a, b := normalizeState(tc.cmd, tc.before), normalizeState(tc.cmd, tc.now); a != b {
			t.Errorf("%v: normalized\n%s\n!=\n%s", tc.cmd, a, b)
		}
	}
	// a real difference survives
	if normalizeState([]string{"rdma", "link"}, "link rxe0/1 netdev h0") == normalizeState([]string{"rdma", "link"}, "") {
		t.Error("normalizeState hid a missing rdma link")
	}
}

func TestParseGID(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "0000:0000:0000:0000:0000:ffff:c000:0201\n", want: "192.0.2.1"},
		{in: "fe80:0000:0000:0000:5054:00ff:fe12:3456", want: "fe80::5054:ff:fe12:3456"},
		{in: "0000:0000:0000:0000:0000:0000:0000:0000", want: "::"},
		{in: "fe80::1", wantErr: true},
		{in: "zzzz:0000:0000:0000:0000:ffff:c000:0201", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseGID(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("parseGID(%q) = %v, want error", tc.in, got)
			}
			continue
		}
		if err != nil || !got.Equal(net.ParseIP(tc.want)) {
			t.Errorf("parseGID(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseListenPorts(t *testing.T) {
	in := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1234 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 1235 1 0000000000000000 20 4 30 10 -1
`
	got, err := parseListenPorts(in)
	if err != nil {
		t.Fatal(err)
	}
	if !got[18515] || got[8080] || len(got) != 1 {
		t.Errorf("parseListenPorts = %v, want only 18515", got)
	}
}

func TestParseWriteBW(t *testing.T) {
	report := `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : rxeA
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      2436             0.00               76.12		   0.001218
---------------------------------------------------------------------------------------
`
	tests := []struct {
		name    string
		in      string
		want    float64
		wantErr bool
	}{
		{name: "MB/sec", in: report, want: 76.12},
		{name: "Gb/sec", in: strings.ReplaceAll(strings.ReplaceAll(report, "MB/sec", "Gb/sec"), "76.12", "8.00"), want: 8e9 / 8 / (1 << 20)},
		{name: "no report", in: "Couldn't connect to 192.0.2.1:18515\n", wantErr: true},
	}
	for _, tc := range tests {
		got, err := parseWriteBW(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("%s: parseWriteBW = %v, want error", tc.name, got)
			}
			continue
		}
		if err != nil || got < tc.want*0.999 || got > tc.want*1.001 {
			t.Errorf("%s: parseWriteBW = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

// devinfoRoceV2GID returns the index of the "RoCE v2" GID for ip in `ibv_devinfo -v`'s
// lines "GID[  1]:  ::ffff:192.0.2.21, RoCE v2", or -1.
func devinfoRoceV2GID(out string, ip net.IP) int {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		rest, ok := strings.CutPrefix(l, "GID[")
		if !ok {
			continue
		}
		idx, rest, ok := strings.Cut(rest, "]:")
		if !ok {
			continue
		}
		gid, typ, ok := strings.Cut(strings.TrimSpace(rest), ",")
		if !ok || strings.TrimSpace(typ) != "RoCE v2" || !net.ParseIP(gid).Equal(ip) {
			continue
		}
		if i, err := strconv.Atoi(strings.TrimSpace(idx)); err == nil {
			return i
		}
	}
	return -1
}

// hasGSIQP reports whether `rdma resource show qp` lists the GSI QP (qpn 1).
func hasGSIQP(out string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "lqpn" && f[i+1] == "1" {
				return true
			}
		}
	}
	return false
}
