package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gpuAlignedConfig is what the GPU-aligned phase expects (phases_test.go sets it).
type gpuAlignedConfig struct {
	pool string // a pool with binding gpuAligned
	// nics is the node's answer key: for each GPU (by its device ID, a UUID) the RDMA device
	// and host netdev on its PCIe switch.
	nics     map[string]gpuNIC
	resource corev1.ResourceName // the GPUs' resource (nvidia.com/gpu)
	// fakeRDMAState: the fake RDMA netlink's state file (internal/fakerdma): no device may be
	// recorded outside the host once the pods are gone.
	fakeRDMAState string
}

// gpuNIC is the NIC on one GPU's switch.
type gpuNIC struct{ rdma, netdev string }

// alignedScript prints what the CNI plugin bound to the pod, as key=value lines, then waits:
// its GPUs (the GPU plugin's NVIDIA_VISIBLE_DEVICES), the pool's env file (the variables it
// exports), nccl.conf (NCCL_CONF_FILE) and binding.json from the allocation directory (a pod
// without the pool's resource has none), and the pod's links. busybox sh exits when `.` fails.
const alignedScript = `trap 'exit 0' TERM
echo "gpus=$NVIDIA_VISIBLE_DEVICES"
f=$(env | sed -n 's/^KUBE_RDMA_.*_ENV_FILE=//p' | head -1)
echo "envfile=$f"
if [ -n "$f" ]; then
  . "$f"
  echo "hca=$NCCL_IB_HCA"
  env | sed -n 's/^KUBE_RDMA_.*_\(RDMA_DEVICES\|NETDEVS\)=/\1=/p'
  echo "nccl=$(tr '\n' ' ' <"$NCCL_CONF_FILE")"
  echo "binding=$(tr -d ' \n' <"$(dirname "$f")/binding.json")"
fi
echo "links=$(ip -o link | sed -n 's/^[0-9]*: \([^:@]*\).*/\1/p' | tr '\n' ,)"
echo end
while :; do sleep 2 & wait $!; done
`

// testGPUAligned: the kubelet allocates GPUs (a stand-in for NVIDIA's plugin) and slots of a
// gpuAligned pool independently; the CNI plugin binds each pod the NICs on its GPUs' PCIe
// switches, moves them in, and fills the pod's allocation directory to match.
//
//   - a pod with 2 GPUs and 2 NICs gets the NIC under each of its GPUs;
//   - with one GPU held by a pod without NICs, a pod with 1 GPU and 1 NIC gets the other GPU
//     and must get the NIC under that GPU, not the first free one;
//   - a pod with a NIC and no GPU gets what is left;
//   - the host gets every netdev back, and no RDMA device stays recorded in a pod.
func testGPUAligned(t *testing.T, e *env) {
	if e.gpuAligned == nil {
		t.Fatal("not the GPU-aligned phase: no gpuAligned pool")
	}
	poolName, nics, gpuRes := e.gpuAligned.pool, e.gpuAligned.nics, e.gpuAligned.resource
	ctx := t.Context()
	if err := e.waitAllocatableNames(ctx, map[corev1.ResourceName]int64{gpuRes: int64(len(nics)), e.resource(poolName): int64(len(nics))}); err != nil {
		t.Fatal(err)
	}
	hostLinks, err := e.hookLines(ctx, "links")
	if err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	pod := func(name string, gpus, slots int64) *corev1.Pod {
		p := e.devicePod(ns, name, "", 0)
		c := &p.Spec.Containers[0]
		c.Command = []string{"sh", "-c", alignedScript}
		c.Resources.Limits = corev1.ResourceList{}
		if gpus > 0 {
			c.Resources.Limits[gpuRes] = *resource.NewQuantity(gpus, resource.DecimalSI)
		}
		if slots > 0 {
			c.Resources.Limits[e.resource(poolName)] = *resource.NewQuantity(slots, resource.DecimalSI)
		}
		return p
	}

	// 2 GPUs, 2 NICs.
	start := time.Now()
	e.createPod(t, pod("two", 2, 2))
	e.waitRunning(t, ns, "two")
	two := e.alignedLog(t, ns, "two")
	t.Logf("pod two (%s): %v", time.Since(start).Round(time.Millisecond), two)
	e.checkAligned(t, "two", two, two.gpus, nics, hostLinks)
	e.deletePod(t, ns, "two")
	e.waitLinks(t, hostLinks)

	// One GPU held without NICs; then 1 GPU + 1 NIC.
	e.createPod(t, pod("holder", 1, 0))
	e.waitRunning(t, ns, "holder")
	holder := e.alignedLog(t, ns, "holder")
	if len(holder.gpus) != 1 {
		t.Fatalf("pod holder: GPUs %q, want 1", holder.gpus)
	}
	e.createPod(t, pod("one", 1, 1))
	e.waitRunning(t, ns, "one")
	one := e.alignedLog(t, ns, "one")
	if len(one.gpus) != 1 || one.gpus[0] == holder.gpus[0] {
		t.Fatalf("pod one: GPUs %q next to holder's %q: want the other GPU", one.gpus, holder.gpus)
	}
	e.checkAligned(t, "one", one, one.gpus, nics, hostLinks)
	// No GPU: the NIC left, under the holder's GPU.
	e.createPod(t, pod("nogpu", 0, 1))
	e.waitRunning(t, ns, "nogpu")
	nogpu := e.alignedLog(t, ns, "nogpu")
	if want := []string{nics[holder.gpus[0]].rdma}; !slices.Equal(nogpu.rdma, want) {
		t.Errorf("pod nogpu: RDMA devices %q, want %q (the one left)", nogpu.rdma, want)
	}
	for _, name := range []string{"one", "nogpu", "holder"} {
		e.deletePod(t, ns, name)
	}
	e.waitLinks(t, hostLinks)
	if err := e.fakeRDMAProblems(); err != nil {
		t.Errorf("after every pod is gone: %v", err)
	}
	e.appendReport(t, fmt.Sprintf("gpuAligned: a pod with 2 GPUs got the NICs on their switches (%s), a 1-GPU pod the NIC on its GPU's (%s), a pod without GPUs the one left (%s)",
		strings.Join(two.rdma, ","), strings.Join(one.rdma, ","), strings.Join(nogpu.rdma, ",")))
}

func orDefault(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// alignedLog is alignedScript's output, parsed.
type alignedLog struct {
	gpus, rdma, netdevs, links []string
	hca, nccl                  string
	binding                    struct {
		Pairs []struct {
			NIC   string `json:"nic"`
			Level string `json:"level"`
		} `json:"pairs"`
	}
}

func (e *env) alignedLog(t *testing.T, ns, name string) alignedLog {
	t.Helper()
	var l alignedLog
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		s, err := e.logs(ctx, ns, name)
		if err != nil {
			return err
		}
		if !strings.Contains(s, "\nend\n") {
			return fmt.Errorf("pod %s: log not complete: %q", name, s)
		}
		l = alignedLog{}
		for line := range strings.Lines(s) {
			k, v, _ := strings.Cut(strings.TrimRight(line, "\n"), "=")
			switch k {
			case "gpus":
				l.gpus = commaList(v)
			case "hca":
				l.hca = v
			case "RDMA_DEVICES":
				l.rdma = commaList(v)
			case "NETDEVS":
				l.netdevs = commaList(v)
			case "nccl":
				l.nccl = strings.TrimSpace(v)
			case "links":
				l.links = commaList(v)
			case "binding":
				if v != "" {
					if err := json.Unmarshal([]byte(v), &l.binding); err != nil {
						return fmt.Errorf("pod %s: binding.json: %w", name, err)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// checkAligned: the pod's RDMA devices are the NICs under its GPUs, each pair at PIX; its
// env file and nccl.conf name exactly them; their netdevs left the host and the pod has the
// interfaces the env file names.
func (e *env) checkAligned(t *testing.T, name string, l alignedLog, gpus []string, nics map[string]gpuNIC, hostLinks []string) {
	t.Helper()
	var want, gone []string
	for _, g := range gpus {
		n, ok := nics[g]
		if !ok {
			t.Fatalf("pod %s: GPU %q is not in the answer key", name, g)
		}
		want = append(want, n.rdma)
		gone = append(gone, n.netdev)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(l.rdma))
	if !slices.Equal(got, want) {
		t.Errorf("pod %s with GPUs %q: RDMA devices %q, want %q (the NICs on its GPUs' switches)", name, gpus, got, want)
	}
	if hca := "=" + strings.Join(l.rdma, ","); l.hca != hca {
		t.Errorf("pod %s: NCCL_IB_HCA %q in its env file, want %q", name, l.hca, hca)
	}
	if nccl := "NCCL_IB_HCA=" + l.hca; l.nccl != nccl {
		t.Errorf("pod %s: nccl.conf %q, want %q", name, l.nccl, nccl)
	}
	if len(l.binding.Pairs) != len(gpus) {
		t.Errorf("pod %s: binding.json pairs %+v, want one per GPU", name, l.binding.Pairs)
	}
	for _, p := range l.binding.Pairs {
		if p.Level != "PIX" {
			t.Errorf("pod %s: pair %+v, want level PIX", name, p)
		}
	}
	for _, n := range l.netdevs {
		if !slices.Contains(l.links, n) {
			t.Errorf("pod %s: netdev %s of its env file is not among its links %q", name, n, l.links)
		}
	}
	now, err := e.hookLines(t.Context(), "links")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range gone {
		if slices.Contains(now, n) {
			t.Errorf("pod %s: netdev %s is still in the host", name, n)
		}
	}
	if left := minus(hostLinks, now); len(left) != len(gone) {
		t.Errorf("pod %s: the host lost %q, want %q", name, left, gone)
	}
}

// waitLinks waits until the host has exactly the links it had.
func (e *env) waitLinks(t *testing.T, want []string) {
	t.Helper()
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		now, err := e.hookLines(ctx, "links")
		if err != nil {
			return err
		}
		if !slices.Equal(now, want) {
			return fmt.Errorf("host links: missing %q, extra %q", minus(want, now), minus(now, want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitAllocatableNames waits until the node's allocatable has these counts.
func (e *env) waitAllocatableNames(ctx context.Context, want map[corev1.ResourceName]int64) error {
	return eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		n, err := e.core.Nodes().Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for r, c := range want {
			q := n.Status.Allocatable[r]
			if q.Value() != c {
				return fmt.Errorf("node %s: allocatable %s = %d, want %d", e.node, r, q.Value(), c)
			}
		}
		return nil
	})
}
