package kubectlrdma

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// safeName is what containerScript puts in a shell script unquoted: device
// and netdev names as the kernel allows them, never a shell metacharacter.
var safeName = regexp.MustCompile(`^[A-Za-z0-9_.:@-]+$`)

// probeSysfs is where containerScript reads sysfs (tests point it at a tree
// of their own).
var probeSysfs = "/sys"

// containerScript is the sh script doctor execs in a container: every
// line it prints is "KEY ARGS...". Opening a device node read-write is the
// test (permission bits alone say nothing about the device cgroup), and the
// shell's message says why an open failed. For each RDMA device it prints
// whether the container sees it and every GID type of its ports that reads
// (unused GID entries do not); only shell builtins run per entry, so a
// 256-entry GID table costs no process each.
func containerScript(netdevs, rdmaDevices []string) string {
	var b strings.Builder
	b.WriteString(`for f in /dev/infiniband/uverbs*; do [ -e "$f" ] || continue; if e=$( (exec 3<>"$f") 2>&1 ); then echo "dev $f ok"; else echo "dev $f err ${e##*: }"; fi; done
echo "memlock $(ulimit -l)"
while read -r a b c d _; do [ "$a $b $c" = "Max locked memory" ] && echo "memlock-main $d"; done 2>/dev/null </proc/1/limits
echo "hca ${NCCL_IB_HCA-<unset>}"
echo "gidindex ${NCCL_IB_GID_INDEX-<unset>}"
echo "ucx ${UCX_NET_DEVICES-<unset>}"
echo "ucxgid ${UCX_IB_GID_INDEX-<unset>}"
command -v ip >/dev/null 2>&1 || echo "noip"
`)
	for _, n := range netdevs {
		if safeName.MatchString(n) {
			fmt.Fprintf(&b, "echo \"netdev %s $(cat %s/class/net/%s/operstate 2>/dev/null || echo missing)\"\n", n, probeSysfs, n)
			fmt.Fprintf(&b, "ip -o addr show dev %s 2>/dev/null | while read -r _ _ fam addr _; do echo \"addr %s $fam $addr\"; done\n", n, n)
		}
	}
	for _, d := range rdmaDevices {
		if !safeName.MatchString(d) {
			continue
		}
		fmt.Fprintf(&b, `if [ -d %[2]s/class/infiniband/%[1]s ]; then echo "rdma %[1]s present"
  for t in %[2]s/class/infiniband/%[1]s/ports/*/gid_attrs/types/*; do
    if read -r ty <"$t" 2>/dev/null && [ -n "$ty" ]; then p=${t#%[2]s/class/infiniband/%[1]s/ports/}; echo "gid %[1]s ${p%%%%/*} ${t##*/} $ty"; fi
  done
else echo "rdma %[1]s missing"; fi
`, d, probeSysfs)
	}
	return b.String()
}

// gidEntry is one readable GID table entry.
type gidEntry struct {
	port, index int
	typ         string // "IB/RoCE v1", "RoCE v2"
}

// containerView is what containerScript printed.
type containerView struct {
	devOK     []string
	devErr    map[string]string // device node -> the shell's open error
	memlock   string            // ulimit -l of the exec'd shell: KiB or "unlimited"
	mainLock  string            // the soft RLIMIT_MEMLOCK of the container's PID 1, in bytes or "unlimited"; "" unread
	hca       string            // "<unset>" when unset
	gidIndex  string            // "<unset>" when unset
	ucx       string            // UCX_NET_DEVICES, "<unset>" when unset; "" when not printed (an older script)
	ucxGID    string            // UCX_IB_GID_INDEX, the same
	noIP      bool
	operstate map[string]string   // netdev -> operstate ("missing")
	addrs     map[string][]string // netdev -> addresses
	rdma      map[string]bool     // RDMA device -> /sys/class/infiniband/DEV is there
	gids      map[string][]gidEntry
}

func parseContainerView(out string) containerView {
	v := containerView{devErr: map[string]string{}, operstate: map[string]string{}, addrs: map[string][]string{},
		rdma: map[string]bool{}, gids: map[string][]gidEntry{}}
	for line := range strings.Lines(out) {
		key, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		f := strings.Fields(rest)
		switch {
		case key == "dev" && len(f) == 2 && f[1] == "ok":
			v.devOK = append(v.devOK, strings.TrimPrefix(f[0], "/dev/infiniband/"))
		case key == "dev" && len(f) >= 2 && f[1] == "err":
			_, msg, _ := strings.Cut(rest, " err")
			v.devErr[strings.TrimPrefix(f[0], "/dev/infiniband/")] = strings.TrimSpace(msg)
		case key == "memlock":
			v.memlock = rest
		case key == "memlock-main":
			v.mainLock = rest
		case key == "hca":
			v.hca = rest
		case key == "gidindex":
			v.gidIndex = rest
		case key == "ucx":
			v.ucx = rest
		case key == "ucxgid":
			v.ucxGID = rest
		case key == "noip":
			v.noIP = true
		case key == "netdev" && len(f) == 2:
			v.operstate[f[0]] = f[1]
		case key == "addr" && len(f) == 3:
			v.addrs[f[0]] = append(v.addrs[f[0]], f[1]+" "+f[2])
		case key == "rdma" && len(f) == 2:
			v.rdma[f[0]] = f[1] == "present"
		case key == "gid" && len(f) >= 4:
			port, perr := strconv.Atoi(f[1])
			idx, ierr := strconv.Atoi(f[2])
			if perr == nil && ierr == nil {
				v.gids[f[0]] = append(v.gids[f[0]], gidEntry{port: port, index: idx, typ: strings.Join(f[3:], " ")})
			}
		}
	}
	return v
}

// roceV2 is the indexes of dev's RoCE v2 GIDs the container sees.
func (v containerView) roceV2(dev string) []int {
	var out []int
	for _, g := range v.gids[dev] {
		if g.typ == "RoCE v2" {
			out = append(out, g.index)
		}
	}
	return out
}
