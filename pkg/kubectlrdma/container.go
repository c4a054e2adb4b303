package kubectlrdma

import (
	"fmt"
	"regexp"
	"strings"
)

// safeName is what containerScript puts in a shell script unquoted: device
// and netdev names as the kernel allows them, never a shell metacharacter.
var safeName = regexp.MustCompile(`^[A-Za-z0-9_.:@-]+$`)

// gidProbe is one RoCE v2 GID to look up: device, port, index.
type gidProbe struct {
	dev       string
	port, idx int
}

// containerScript is the sh script doctor execs in a container: every
// line it prints is "KEY ARGS...". Opening a device node read-write is the
// test (permissions bits alone say nothing about the device cgroup).
func containerScript(netdevs []string, gids []gidProbe) string {
	var b strings.Builder
	b.WriteString(`for f in /dev/infiniband/uverbs*; do [ -e "$f" ] || continue; if (exec 3<>"$f") 2>/dev/null; then echo "dev $f ok"; else echo "dev $f denied"; fi; done
echo "memlock $(ulimit -l)"
echo "hca ${NCCL_IB_HCA-<unset>}"
echo "gidindex ${NCCL_IB_GID_INDEX-<unset>}"
command -v ip >/dev/null 2>&1 || echo "noip"
`)
	for _, n := range netdevs {
		if safeName.MatchString(n) {
			fmt.Fprintf(&b, "echo \"netdev %s $(cat /sys/class/net/%s/operstate 2>/dev/null || echo missing)\"\n", n, n)
			fmt.Fprintf(&b, "ip -o addr show dev %s 2>/dev/null | while read -r _ _ fam addr _; do echo \"addr %s $fam $addr\"; done\n", n, n)
		}
	}
	for _, g := range gids {
		if safeName.MatchString(g.dev) {
			fmt.Fprintf(&b, "echo \"gid %s %d $(cat /sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d 2>/dev/null || echo missing)\"\n",
				g.dev, g.idx, g.dev, g.port, g.idx)
		}
	}
	return b.String()
}

// containerView is what containerScript printed.
type containerView struct {
	devOK, devDenied []string
	memlock          string
	hca, gidIndex    string // "<unset>" when unset
	noIP             bool
	operstate        map[string]string   // netdev -> operstate ("missing")
	addrs            map[string][]string // netdev -> addresses
	gidType          map[string]string   // device -> type of the probed GID ("missing")
}

func parseContainerView(out string) containerView {
	v := containerView{operstate: map[string]string{}, addrs: map[string][]string{}, gidType: map[string]string{}}
	for line := range strings.Lines(out) {
		key, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		f := strings.Fields(rest)
		switch {
		case key == "dev" && len(f) == 2 && f[1] == "ok":
			v.devOK = append(v.devOK, strings.TrimPrefix(f[0], "/dev/infiniband/"))
		case key == "dev" && len(f) == 2:
			v.devDenied = append(v.devDenied, strings.TrimPrefix(f[0], "/dev/infiniband/"))
		case key == "memlock":
			v.memlock = rest
		case key == "hca":
			v.hca = rest
		case key == "gidindex":
			v.gidIndex = rest
		case key == "noip":
			v.noIP = true
		case key == "netdev" && len(f) == 2:
			v.operstate[f[0]] = f[1]
		case key == "addr" && len(f) == 3:
			v.addrs[f[0]] = append(v.addrs[f[0]], f[1]+" "+f[2])
		case key == "gid" && len(f) >= 3:
			v.gidType[f[0]] = strings.Join(f[2:], " ")
		}
	}
	return v
}
