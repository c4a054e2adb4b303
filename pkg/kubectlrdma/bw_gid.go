package kubectlrdma

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// ErrDeviceNotInPod: the pod does not see the RDMA device bw would run on
// (/sys/class/infiniband/DEV is missing in it).
var ErrDeviceNotInPod = errors.New("RDMA device not visible in the pod")

// bwProbeMark starts the script bwProbeScript returns.
const bwProbeMark = "# kubectl rdma bw probe\n"

// bwProbeScript is the sh script bw execs in each pod before perftest: is
// ib_write_bw on PATH, and what the pod itself sees of dev's port: its link
// layer, its GID table (index, GID, type) and netdev's addresses. The GID
// table is read in the pod because the node state's is the host's: a
// soft-RoCE device re-created in the pod, or a netns with other addresses,
// has a table of its own. Reads use the shell's read builtin, not one cat
// per entry: a port lists hundreds of GID slots, and an empty slot's type
// fails to read (EINVAL). dev and netdev must match safeName.
func bwProbeScript(dev string, port int, netdev string) string {
	var b strings.Builder
	b.WriteString(bwProbeMark)
	b.WriteString("if command -v ib_write_bw >/dev/null 2>&1; then echo perftest yes; else echo perftest no; fi\n")
	// timeout with -s (coreutils, busybox 1.30 and later: busybox before took -t SECS) bounds
	// ib_write_bw in the pod: a process that an exec left behind is not stopped when the exec
	// ends, and perftest's server waits for a client for good.
	b.WriteString("if timeout -s KILL 5 true >/dev/null 2>&1; then echo timeout yes; else echo timeout no; fi\n")
	fmt.Fprintf(&b, "[ -d /sys/class/infiniband/%s ] || { echo nodev; exit 0; }\n", dev)
	fmt.Fprintf(&b, "d=/sys/class/infiniband/%s/ports/%d\n", dev, port)
	b.WriteString(`{ read -r l < "$d/link_layer"; } 2>/dev/null && echo "linklayer $l"
for f in "$d"/gid_attrs/types/*; do
	i=${f##*/}
	{ read -r t < "$f" && read -r g < "$d/gids/$i"; } 2>/dev/null || continue
	echo "gid $i $g $t"
done
`)
	if netdev != "" {
		fmt.Fprintf(&b, "ip -o addr show dev %s 2>/dev/null | while read -r _ _ fam addr _; do echo \"addr $fam $addr\"; done\n", netdev)
	}
	b.WriteString("exit 0\n") // what the probe prints is the answer, not its status
	return b.String()
}

// podGID is one GID-table entry the probe printed.
type podGID struct {
	index int
	ip    net.IP // the GID as an address (IPv4-mapped for an IPv4 GID)
	typ   string // "IB/RoCE v1", "RoCE v2"
}

// bwProbe is what bwProbeScript printed.
type bwProbe struct {
	perftest  bool
	timeout   bool // timeout -s KILL SECS CMD works in the pod
	noDev     bool
	linkLayer string
	gids      []podGID
	addrs     []net.IP
}

func parseBWProbe(out string) bwProbe {
	var p bwProbe
	for line := range strings.Lines(out) {
		key, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		f := strings.Fields(rest)
		switch {
		case key == "perftest":
			p.perftest = rest == "yes"
		case key == "timeout":
			p.timeout = rest == "yes"
		case key == "nodev":
			p.noDev = true
		case key == "linklayer":
			p.linkLayer = rest
		case key == "gid" && len(f) >= 3:
			i, err := strconv.Atoi(f[0])
			ip := parseSysfsGID(f[1])
			if err == nil && ip != nil {
				p.gids = append(p.gids, podGID{index: i, ip: ip, typ: strings.Join(f[2:], " ")})
			}
		case key == "addr" && len(f) == 2:
			if ip, _, err := net.ParseCIDR(f[1]); err == nil {
				p.addrs = append(p.addrs, ip)
			}
		}
	}
	slices.SortFunc(p.gids, func(a, b podGID) int { return a.index - b.index })
	return p
}

// parseSysfsGID reads a GID as sysfs prints it
// ("0000:0000:0000:0000:0000:ffff:c000:0215"); nil when malformed.
func parseSysfsGID(s string) net.IP {
	b, err := hex.DecodeString(strings.ReplaceAll(s, ":", ""))
	if err != nil || len(b) != net.IPv6len {
		return nil
	}
	return net.IP(b)
}

// pickGID chooses the RoCE v2 GID index for -x from the pod's own table:
// the GID of an IPv4 address of netdev in the pod, else the first RoCE v2
// GID with an IPv4-mapped address. ok is false when the pod lists none;
// why says which rule chose.
func pickGID(p bwProbe, netdev string) (idx int, why string, ok bool) {
	var first *podGID
	for i, g := range p.gids {
		if g.typ != "RoCE v2" || g.ip.To4() == nil {
			continue
		}
		if slices.ContainsFunc(p.addrs, g.ip.Equal) {
			return g.index, fmt.Sprintf("in the pod: RoCE v2, %s on %s", g.ip, netdev), true
		}
		if first == nil {
			first = &p.gids[i]
		}
	}
	if first == nil {
		return 0, "", false
	}
	return first.index, fmt.Sprintf("in the pod: first RoCE v2 IPv4 GID, %s", first.ip), true
}

// probeEnd execs bwProbeScript in e's pod and settles e's GID index: the
// pod's own RoCE v2 GID on Ethernet, else the node state's.
func probeEnd(ctx context.Context, ex Execer, e *bwEnd) error {
	for _, n := range []string{e.podDev, e.netdev} {
		if n != "" && !safeName.MatchString(n) {
			return fmt.Errorf("pod %s/%s: device or netdev name %q is not a plain name", e.pod.Namespace, e.pod.Name, n)
		}
	}
	out, err := ex.Exec(ctx, e.pod.Namespace, e.pod.Name, e.container, []string{"sh", "-c", bwProbeScript(e.podDev, e.port, e.netdev)})
	if errors.Is(err, ErrForbidden) {
		return err
	}
	if err != nil {
		return fmt.Errorf("pod %s/%s: probe for ib_write_bw and %s's GIDs: %w", e.pod.Namespace, e.pod.Name, e.podDev, err)
	}
	p := parseBWProbe(out)
	e.timeout = p.timeout
	switch {
	case !p.perftest:
		return fmt.Errorf("pod %s/%s: %w", e.pod.Namespace, e.pod.Name, ErrNoPerftest)
	case p.noDev:
		return fmt.Errorf("pod %s/%s: %s: %w (/sys/class/infiniband/%s is missing in it)", e.pod.Namespace, e.pod.Name, e.podDev, ErrDeviceNotInPod, e.podDev)
	}
	linkLayer := p.linkLayer
	if linkLayer == "" {
		linkLayer = e.dev.LinkLayer
	}
	if linkLayer != "Ethernet" {
		return nil // InfiniBand: LIDs, no GID index
	}
	if idx, why, ok := pickGID(p, e.netdev); ok {
		e.gidIndex, e.gidFrom = &idx, why
		return nil
	}
	if e.stateGID != nil {
		e.gidIndex, e.gidFrom = e.stateGID, "the node state's: the pod lists no RoCE v2 IPv4 GID"
		return nil
	}
	return fmt.Errorf("pod %s/%s: %s has no RoCE v2 GID (no IP address on its netdev?)", e.pod.Namespace, e.pod.Name, e.podDev)
}
