package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// loadKind is one kind of pod the upgrade phases keep running beside a rollout (one watched
// pod) and create during it: a device plugin pool's, a gpuAligned pool's with a GPU, a DRA
// pool's claim. Every pod runs podScript (its log: device nodes, links, environment).
type loadKind struct {
	name   string // the pool; pods are named after it
	count  int    // its devices (a shared pool: its slots)
	shared bool
	// oneShot: its pods exit once they logged what they got (restartPolicy Never), giving
	// their devices back: the pool has too few for load pods that stay.
	oneShot bool
	// prepare makes what its pods need in a namespace (a claim template); nil: nothing.
	prepare func(t *testing.T, ns string)
	pod     func(ns, name string) *corev1.Pod
	// problems: what a pod that ran, logging l, lacks (nil: nothing).
	problems func(ctx context.Context, ns, name string, l podLog) []string
}

// loadKinds are the kinds of the phase's pools: the gpuAligned pool's (its pods with a GPU),
// else each device plugin pool's (e.pools) and each DRA pool's claim. bulk: the kinds that
// take most of the load (the chained pool; without one, every exclusive kind of more than 2
// devices), the others one pod (a shared pool a quarter) per rollout.
func (e *env) loadKinds() (kinds []loadKind, bulk []string) {
	if g := e.gpuAligned; g != nil {
		return []loadKind{e.alignedKind(g)}, []string{g.pool}
	}
	for _, p := range e.pools {
		if p.count > 0 {
			kinds = append(kinds, e.poolKind(p))
		}
	}
	if e.dra != nil {
		for _, name := range slices.Sorted(maps.Keys(e.dra.pools)) {
			if n := e.dra.pools[name]; n > 0 {
				kinds = append(kinds, e.claimKind(name, n))
			}
		}
	}
	for _, k := range kinds {
		switch {
		case e.chainedPool != "":
			if k.name == e.chainedPool {
				bulk = append(bulk, k.name)
			}
		case !k.shared && k.count > 2:
			bulk = append(bulk, k.name)
		}
	}
	return kinds, bulk
}

// poolKind: a pod with one device (slot) of a device plugin pool; it gets the device's nodes
// (a slot of a shared pool: every device of the pool), the pool's environment and, in the
// chained pool, its netdev.
func (e *env) poolKind(p pool) loadKind {
	return loadKind{name: p.name, count: int(p.count), shared: p.mode == "shared",
		pod: func(ns, name string) *corev1.Pod { return e.devicePod(ns, name, p.name, 1) },
		problems: func(_ context.Context, _, _ string, l podLog) []string {
			n := 1
			if p.mode == "shared" {
				n = max(strings.Count(strings.Join(l.ticks[0].dev, ","), "uverbs"), 1)
			}
			problems := deviceProblems(l.ticks[0].dev, n)
			problems = append(problems, envProblems(l.env, p.name, n, e.nccl(p.name))...)
			if p.name == e.chainedPool {
				problems = append(problems, netdevProblems(l.ticks[0].links, 1)...)
			}
			return problems
		}}
}

// alignedEnvFile exports the variables of the gpuAligned pool's env file (the CNI plugin
// writes it for the NICs it bound to the pod) before podScript logs the environment.
const alignedEnvFile = `f=$(env | sed -n 's/^KUBE_RDMA_.*_ENV_FILE=//p' | head -1)
if [ -n "$f" ]; then set -a; . "$f"; set +a; fi
`

// alignedKind: a pod with one GPU (the stand-in GPU plugin's) and one NIC of the gpuAligned
// pool. It gets the device nodes of every member of the pool (docs/gpu-aligned.md), and in
// its env file exactly the NIC on its GPU's switch, NCCL_IB_HCA naming it, and its netdev.
// One-shot: the pool has a NIC per GPU, the watched pod holds one pair.
func (e *env) alignedKind(g *gpuAlignedConfig) loadKind {
	members := len(g.nics)
	return loadKind{name: g.pool, count: members, oneShot: true,
		pod: func(ns, name string) *corev1.Pod {
			p := e.devicePod(ns, name, g.pool, 1)
			c := &p.Spec.Containers[0]
			c.Resources.Limits[g.resource] = *resource.NewQuantity(1, resource.DecimalSI)
			c.Command = []string{"sh", "-c", alignedEnvFile + podScript}
			return p
		},
		problems: func(_ context.Context, _, _ string, l podLog) []string {
			problems := deviceProblems(l.ticks[0].dev, members)
			problems = append(problems, envProblems(l.env, g.pool, 1, true)...)
			gpu := l.env["NVIDIA_VISIBLE_DEVICES"]
			nic, ok := g.nics[gpu]
			got := l.env["KUBE_RDMA_"+envName(g.pool)+"_RDMA_DEVICES"]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q: not one GPU of the answer key", gpu))
			case got != nic.rdma:
				problems = append(problems, fmt.Sprintf("GPU %s: RDMA devices %q, want %q (the NIC on its switch)", gpu, got, nic.rdma))
			}
			netdevs := l.env["KUBE_RDMA_"+envName(g.pool)+"_NETDEVS"]
			if netdevs == "" {
				problems = append(problems, "no netdev in its env file")
			}
			for n := range strings.SplitSeq(netdevs, ",") {
				if n != "" && !slices.Contains(l.ticks[0].links, n) {
					problems = append(problems, fmt.Sprintf("netdev %s of its env file is not among its links %q", n, l.ticks[0].links))
				}
			}
			return problems
		}}
}

// claimKind: a pod whose claim template asks for one NIC of a DRA pool; its claim is
// allocated one device of the pool, reserved for the pod, and the container gets that
// device's nodes and NCCL's variables as the pool says (nicProblems).
func (e *env) claimKind(pool string, n int) loadKind {
	tmpl := "one-nic-" + dnsName(pool)
	return loadKind{name: pool, count: n,
		prepare: func(t *testing.T, ns string) {
			e.createTemplate(t, ns, tmpl, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(pool))}})
		},
		pod: func(ns, name string) *corev1.Pod { return e.claimPod(ns, name, tmpl) },
		problems: func(ctx context.Context, ns, name string, l podLog) []string {
			claim, err := e.podClaimOf(ctx, ns, name)
			if err != nil {
				return []string{err.Error()}
			}
			res := claim.Status.Allocation.Devices.Results
			if len(res) != 1 || res[0].Driver != draDriver {
				return []string{fmt.Sprintf("claim %s: results %+v, want one device of %s", claim.Name, res, draDriver)}
			}
			dev, err := e.draDevice(ctx, draDriver, res[0].Device)
			if err != nil {
				return []string{err.Error()}
			}
			problems := e.nicProblems(l, dev)
			if got := attrString(dev, attrPool); got != pool {
				problems = append(problems, fmt.Sprintf("claim %s got device %s of pool %q, want %q", claim.Name, dev.Name, got, pool))
			}
			return problems
		}}
}

// oneShot is podScript that exits after its first tick line.
func oneShot(pod *corev1.Pod) *corev1.Pod {
	c := &pod.Spec.Containers[0]
	c.Command[len(c.Command)-1] = strings.Replace(c.Command[len(c.Command)-1], "while :; do", "for once in 1; do", 1)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	return pod
}

// fakeRDMAProblems: the fake RDMA netlink's state file (gpuAligned phases) records no RDMA
// device in a pod's namespace; nil without such a file.
func (e *env) fakeRDMAProblems() error {
	if e.gpuAligned == nil || e.gpuAligned.fakeRDMAState == "" {
		return nil
	}
	data, err := os.ReadFile(e.gpuAligned.fakeRDMAState)
	if err != nil {
		return fmt.Errorf("fake RDMA state: %w", err)
	}
	var s struct {
		Devices map[string]string `json:"devices"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("fake RDMA state %s: %w", data, err)
	}
	if len(s.Devices) != 0 {
		return fmt.Errorf("RDMA devices still in pods' namespaces: %s", data)
	}
	return nil
}

// claimsLeft: no ResourceClaim left on the cluster (DRA phases; claims made from a pod's
// template go with the pod, their devices free once they are gone).
func (e *env) claimsLeft(ctx context.Context) error {
	if e.dra == nil {
		return nil
	}
	list, err := e.draAPI.ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list resource claims: %w", err)
	}
	if n := len(list.Items); n > 0 {
		return fmt.Errorf("%d resource claims left (e.g. %s/%s)", n, list.Items[0].Namespace, list.Items[0].Name)
	}
	return nil
}
