package suite

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// podScript is what every device pod runs (busybox sh): what it got, once
// for people reading the log, the DRA device metadata files mounted into it
// (each as a "file <path>" line, then its content), its environment, then
// every 2 s a "tick" line
// with its link names and /dev/infiniband entries, so that tests can see the
// pod's devices and netdevs at any later time without exec. It exits on
// SIGTERM (PID 1 ignores signals it has no handler for).
const podScript = `trap 'exit 0' TERM
echo '== dev'; ls -1 /dev/infiniband 2>&1
echo '== links'; ip -o link
echo '== metadata'
find /var/run/kubernetes.io/dra-device-attributes -type f 2>/dev/null | sort | while read -r f; do echo "file $f"; cat "$f"; done
echo '== env'; env | sort
echo '== end'
while :; do
  echo "tick links=$(ip -o link | sed -n 's/^[0-9]*: \([^:@]*\).*/\1/p' | tr '\n' ,) dev=$(ls /dev/infiniband 2>/dev/null | tr '\n' ,)"
  sleep 2 & wait $!
done
`

// podLog is a device pod's log, parsed.
type podLog struct {
	env   map[string]string // nil until the env section is complete
	ticks []tick
	// metadata are the DRA device metadata files by in-container path,
	// complete once env is.
	metadata map[string]string
}

// tick is one tick line: the pod's link names and /dev/infiniband entries.
type tick struct{ links, dev []string }

func (l podLog) last() tick {
	if len(l.ticks) == 0 {
		return tick{}
	}
	return l.ticks[len(l.ticks)-1]
}

func parseLog(s string) podLog {
	var l podLog
	var env map[string]string
	var meta map[string]string
	file := ""
	for line := range strings.Lines(s) {
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "== metadata":
			meta = map[string]string{}
		case line == "== env":
			l.metadata, meta = meta, nil
			env = map[string]string{}
		case meta != nil:
			if f, ok := strings.CutPrefix(line, "file "); ok {
				file = f
				meta[file] = ""
			} else if file != "" {
				meta[file] += line + "\n"
			}
		case line == "== end":
			l.env, env = env, nil
		case env != nil:
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		case strings.HasPrefix(line, "tick "):
			var tk tick
			for f := range strings.FieldsSeq(line[len("tick "):]) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "links":
					tk.links = commaList(v)
				case "dev":
					tk.dev = commaList(v)
				}
			}
			l.ticks = append(l.ticks, tk)
		}
	}
	return l
}

func commaList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v != "" {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// envName is the pool's part of KUBE_RDMA_<POOL>_*: upper case, other
// characters than letters and digits '_' (config.EnvName in the daemon).
func envName(pool string) string {
	return strings.Map(func(r rune) rune {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, strings.ToUpper(pool))
}

var devEntry = regexp.MustCompile(`^(uverbs|umad|issm)[0-9]+$|^rdma_cm$`)

// deviceProblems checks a pod's /dev/infiniband after it was given n devices
// of an exclusive pool: n uverbs nodes (which ones the env says, and uverbsN
// numbering does not follow device names), rdma_cm, and the umadN/issmN pairs
// of their ports (ib_umad creates both with one N per port), nothing else.
func deviceProblems(dev []string, n int) []string {
	var problems []string
	uverbs := 0
	var umad, issm []string
	for _, d := range dev {
		switch {
		case !devEntry.MatchString(d):
			problems = append(problems, fmt.Sprintf("/dev/infiniband/%s is not a device node the plugin hands out", d))
		case strings.HasPrefix(d, "uverbs"):
			uverbs++
		case strings.HasPrefix(d, "umad"):
			umad = append(umad, strings.TrimPrefix(d, "umad"))
		case strings.HasPrefix(d, "issm"):
			issm = append(issm, strings.TrimPrefix(d, "issm"))
		}
	}
	if uverbs != n {
		problems = append(problems, fmt.Sprintf("/dev/infiniband has %d uverbs nodes %v, want %d", uverbs, dev, n))
	}
	slices.Sort(umad)
	slices.Sort(issm)
	if !slices.Equal(umad, issm) {
		problems = append(problems, fmt.Sprintf("/dev/infiniband %v: umad and issm numbers differ (one port's pair is half there)", dev))
	}
	return problems
}

// envProblems checks the environment of a pod given n devices of pool:
// NCCL_IB_HCA names them when the pool sets NCCL's variables (nccl), and
// is unset when it does not.
func envProblems(env map[string]string, pool string, n int, nccl bool) []string {
	key := "KUBE_RDMA_" + envName(pool) + "_RDMA_DEVICES"
	v, ok := env[key]
	if !ok {
		return []string{key + " not set"}
	}
	var problems []string
	names := strings.Split(v, ",")
	if sorted := slices.Compact(slices.Sorted(slices.Values(names))); len(names) != n || len(sorted) != n || slices.Contains(names, "") {
		problems = append(problems, fmt.Sprintf("%s=%q: want %d distinct names", key, v, n))
	}
	got, set := env["NCCL_IB_HCA"]
	switch {
	case nccl && got != "="+v:
		problems = append(problems, fmt.Sprintf("NCCL_IB_HCA=%q, want %q", got, "="+v))
	case !nccl && set:
		problems = append(problems, fmt.Sprintf("NCCL_IB_HCA=%q, want it unset: pool %s has nccl: false", got, pool))
	}
	// UCX_NET_DEVICES may be unset: a daemon of an earlier release (the upgrade phases) set none.
	ucx, set := env["UCX_NET_DEVICES"]
	switch {
	case nccl && set && ucxDevices(ucx) != v:
		problems = append(problems, fmt.Sprintf("UCX_NET_DEVICES=%q, want the ports of %s", ucx, v))
	case !nccl && set:
		problems = append(problems, fmt.Sprintf("UCX_NET_DEVICES=%q, want it unset: pool %s has nccl: false", ucx, pool))
	}
	return problems
}

// ucxDevices is the device names of a UCX_NET_DEVICES value (device:port,...), in order, once
// each, joined by ",": "mlx5_0:1,mlx5_0:2,mlx5_3:1" is "mlx5_0,mlx5_3". An entry without a
// port is kept whole, and so fails the comparison.
func ucxDevices(v string) string {
	var names []string
	for _, e := range strings.Split(v, ",") {
		name, port, ok := strings.Cut(e, ":")
		if !ok || port == "" {
			name = e + " (no port)"
		}
		if len(names) == 0 || names[len(names)-1] != name {
			names = append(names, name)
		}
	}
	return strings.Join(names, ",")
}

// netdevProblems checks that the pod has net1..netN and no net(N+1).
func netdevProblems(links []string, n int) []string {
	var problems []string
	for i := 1; i <= n; i++ {
		if !slices.Contains(links, fmt.Sprintf("net%d", i)) {
			problems = append(problems, fmt.Sprintf("no net%d in the pod's links %v", i, links))
		}
	}
	if extra := fmt.Sprintf("net%d", n+1); slices.Contains(links, extra) {
		problems = append(problems, fmt.Sprintf("%s in the pod's links %v: more netdevs than devices", extra, links))
	}
	return problems
}

func TestParseLog(t *testing.T) {
	log := `== dev
rdma_cm
uverbs3
== links
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue qlen 1000\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
== metadata
file /var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/devices/nic/rdma.kube-rdma.io-metadata.json
{"kind":"DeviceMetadata"}
file /x/y.json
{"a":1}
{"a":2}
== env
KUBE_RDMA_VF_RDMA_DEVICES=mlx5_4
NCCL_IB_HCA==mlx5_4
== end
tick links=lo,eth0,net1, dev=rdma_cm,uverbs3,
tick links=lo,eth0, dev=
`
	l := parseLog(log)
	want := map[string]string{"KUBE_RDMA_VF_RDMA_DEVICES": "mlx5_4", "NCCL_IB_HCA": "=mlx5_4"}
	if diff := cmp.Diff(want, l.env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	wantMeta := map[string]string{
		"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/devices/nic/rdma.kube-rdma.io-metadata.json": "{\"kind\":\"DeviceMetadata\"}\n",
		"/x/y.json": "{\"a\":1}\n{\"a\":2}\n"}
	if diff := cmp.Diff(wantMeta, l.metadata); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	wantTicks := []tick{{[]string{"eth0", "lo", "net1"}, []string{"rdma_cm", "uverbs3"}}, {[]string{"eth0", "lo"}, nil}}
	if diff := cmp.Diff(wantTicks, l.ticks, cmp.AllowUnexported(tick{})); diff != "" {
		t.Errorf("ticks (-want +got):\n%s", diff)
	}
	if l := parseLog("== env\nA=1\n"); l.env != nil {
		t.Errorf("an env section without its end: %v, want nil", l.env)
	}
}

func TestChecks(t *testing.T) {
	tests := []struct {
		name     string
		problems []string
		want     int
	}{
		{"two uverbs", deviceProblems([]string{"rdma_cm", "umad1", "issm1", "uverbs7", "uverbs2"}, 2), 0},
		{"one too many", deviceProblems([]string{"uverbs0", "uverbs1"}, 1), 1},
		{"stranger", deviceProblems([]string{"uverbs0", "mystery"}, 1), 1},
		{"rxe: no umad", deviceProblems([]string{"uverbs0"}, 1), 0},
		{"half a pair", deviceProblems([]string{"uverbs0", "umad0", "issm0", "umad1"}, 1), 1},
		{"env ok", envProblems(map[string]string{"KUBE_RDMA_ROCE_SHARED_RDMA_DEVICES": "mlx5_0,mlx5_10", "NCCL_IB_HCA": "=mlx5_0,mlx5_10"}, "roce-shared", 2, true), 0},
		{"env count", envProblems(map[string]string{"KUBE_RDMA_IB_RDMA_DEVICES": "mlx5_0,mlx5_0", "NCCL_IB_HCA": "=mlx5_0,mlx5_0"}, "ib", 2, true), 1},
		{"nccl differs", envProblems(map[string]string{"KUBE_RDMA_IB_RDMA_DEVICES": "mlx5_0", "NCCL_IB_HCA": "mlx5_0"}, "ib", 1, true), 1},
		{"env missing", envProblems(map[string]string{}, "ib", 1, true), 1},
		{"ucx ok", envProblems(map[string]string{"KUBE_RDMA_IB_RDMA_DEVICES": "mlx5_0,mlx5_1", "NCCL_IB_HCA": "=mlx5_0,mlx5_1",
			"UCX_NET_DEVICES": "mlx5_0:1,mlx5_0:2,mlx5_1:1"}, "ib", 2, true), 0},
		{"ucx names another device", envProblems(map[string]string{"KUBE_RDMA_IB_RDMA_DEVICES": "mlx5_0", "NCCL_IB_HCA": "=mlx5_0",
			"UCX_NET_DEVICES": "mlx5_1:1"}, "ib", 1, true), 1},
		{"ucx without a port", envProblems(map[string]string{"KUBE_RDMA_IB_RDMA_DEVICES": "mlx5_0", "NCCL_IB_HCA": "=mlx5_0",
			"UCX_NET_DEVICES": "mlx5_0"}, "ib", 1, true), 1},
		{"ucx from a pool with nccl: false", envProblems(map[string]string{"KUBE_RDMA_VF_RDMA_DEVICES": "mlx5_3",
			"UCX_NET_DEVICES": "mlx5_3:1"}, "vf", 1, false), 1},
		{"netdevs ok", netdevProblems([]string{"eth0", "lo", "net1", "net2"}, 2), 0},
		{"netdev missing and extra", netdevProblems([]string{"net2", "net3"}, 2), 2},
	}
	for _, tc := range tests {
		if len(tc.problems) != tc.want {
			t.Errorf("%s: %d problems %q, want %d", tc.name, len(tc.problems), tc.problems, tc.want)
		}
	}
}
