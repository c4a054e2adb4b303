package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// testMultiPoolPod runs a pod with one device of an NCCL pool and one of a
// pool with nccl: false (on the local node: ib, and the chained vf pool),
// the layout of a compute fabric beside a storage network. NCCL_IB_HCA
// names the NCCL pool's device only, whatever order the kubelet merged the two
// pools' responses in; no RoCE GID index comes with an InfiniBand HCA; both
// pools' KUBE_RDMA_<POOL>_RDMA_DEVICES are there; and kubectl rdma doctor,
// run as soon as the pod is Ready (as a user does) and again once the node
// state has the pod, fails no check but those the fixture devices cause.
func testMultiPoolPod(t *testing.T, e *env) {
	var nccl, other *pool
	for _, p := range e.exclusivePools() {
		switch {
		case e.nccl(p.name) && nccl == nil:
			nccl = &p
		case !e.nccl(p.name) && other == nil:
			other = &p
		}
	}
	if nccl == nil || other == nil {
		t.Skip("the phase has no exclusive NCCL pool beside an exclusive pool that is not")
	}
	ns := e.namespace(t)
	name := "multi-pool"
	pod := e.devicePod(ns, name, nccl.name, 1)
	pod.Spec.Containers[0].Resources.Limits[e.resource(other.name)] = *resource.NewQuantity(1, resource.DecimalSI)
	e.createPod(t, pod)
	e.waitRunning(t, ns, name)

	// Right after Ready: the node state may predate the pod, which doctor must say as
	// such, never as a missing allocation.
	out, _ := e.kubectlRDMA(t, "doctor", "-n", ns, name)
	t.Logf("kubectl rdma doctor -n %s %s (right after Ready):\n%s", ns, name, out)
	for check, got := range doctorLines(out) {
		if strings.HasPrefix(check, "allocation ") && strings.HasPrefix(got, "FAIL") {
			t.Errorf("doctor's %q right after Ready: %s", check, got)
		}
	}

	l := e.waitLog(t, ns, name, 1)
	ncclDevs := l.env["KUBE_RDMA_"+envName(nccl.name)+"_RDMA_DEVICES"]
	otherDevs := l.env["KUBE_RDMA_"+envName(other.name)+"_RDMA_DEVICES"]
	t.Logf("pod %s: %s=%s, %s=%s, NCCL_IB_HCA=%s, NCCL_IB_GID_INDEX=%s", name, nccl.name, ncclDevs, other.name, otherDevs,
		l.env["NCCL_IB_HCA"], l.env["NCCL_IB_GID_INDEX"])
	if ncclDevs == "" || otherDevs == "" {
		t.Fatalf("pod %s: KUBE_RDMA_* of %s %q and of %s %q, want one device each", name, nccl.name, ncclDevs, other.name, otherDevs)
	}
	if got := l.env["NCCL_IB_HCA"]; got != "="+ncclDevs {
		t.Errorf("NCCL_IB_HCA=%q, want %q: the devices of the NCCL pool %s only, not %s's %s", got, "="+ncclDevs, nccl.name, other.name, otherDevs)
	}
	if got := l.env["UCX_NET_DEVICES"]; ucxDevices(got) != ncclDevs {
		t.Errorf("UCX_NET_DEVICES=%q, want the ports of %s: the devices of the NCCL pool %s only, not %s's %s", got, ncclDevs, nccl.name, other.name, otherDevs)
	}

	state := e.waitNodeState(t, "the pod's allocations and attachment", func(s *v1alpha1.RDMANodeState) error {
		for _, p := range []string{nccl.name, other.name} {
			i := slices.IndexFunc(s.Status.Allocations, func(a v1alpha1.Allocation) bool {
				return a.Namespace == ns && a.Pod == name && a.Resource == string(e.resource(p))
			})
			if i < 0 {
				return fmt.Errorf("no allocation of %s to %s/%s", p, ns, name)
			}
			if p == e.chainedPool && len(s.Status.Allocations[i].Attached) == 0 {
				return fmt.Errorf("allocation of %s to %s/%s without its CNI attachment yet", p, ns, name)
			}
		}
		return nil
	})
	infiniband := slices.ContainsFunc(state.Status.Devices, func(d v1alpha1.Device) bool {
		return d.Name == ncclDevs && d.LinkLayer == "InfiniBand"
	})
	if gid, set := l.env["NCCL_IB_GID_INDEX"]; infiniband && set {
		t.Errorf("NCCL_IB_GID_INDEX=%s with the InfiniBand HCA %s: a RoCE GID index from pool %s", gid, ncclDevs, other.name)
	}

	out, code := e.kubectlRDMA(t, "doctor", "-n", ns, name)
	t.Logf("kubectl rdma doctor -n %s %s:\n%s", ns, name, out)
	checks := doctorLines(out)
	// What fixture devices cause (TestNodeState): device nodes with no driver behind them,
	// and no RoCE GID in a kernel without the RDMA device.
	fixture := map[string]bool{"in container: /dev/infiniband device nodes openable": true, "in container: RoCE v2 GID": true}
	failed := 0
	for check, got := range checks {
		if !strings.HasPrefix(got, "FAIL") {
			continue
		}
		failed++
		if !e.fixtureDevs || !fixture[check] {
			t.Errorf("doctor's %q failed: %s", check, got)
		}
	}
	if got := checks["in container: NCCL environment matches the allocation"]; !strings.HasPrefix(got, "PASS NCCL_IB_HCA="+"="+ncclDevs) {
		t.Errorf("doctor's NCCL check: %q, want a pass naming %s", got, ncclDevs)
	}
	if failed == 0 && code != 0 {
		t.Errorf("doctor exit %d with no failed check", code)
	}
	e.deletePod(t, ns, name)
}

// testRailPools: pools that each set NCCL's variables, one per rail, with the
// NRI plugin on. A pod with one device of every pool, and a pod with devices of
// two, get NCCL_IB_HCA and UCX_NET_DEVICES naming every device they hold
// (each pool's Allocate names its own, and the kubelet keeps one value per
// variable: without the NRI plugin NCCL would use one NIC); the node reports
// the layout as a configuration problem (a container created while the NRI
// plugin is away would get one pool's values); kubectl rdma doctor's NCCL
// check passes.
func testRailPools(t *testing.T, e *env) {
	pools := e.exclusivePools()
	if len(pools) < 4 {
		t.Fatalf("pools %v: want four or more rail pools with devices", pools)
	}
	e.waitNRIConnected(t)
	ns := e.namespace(t)
	for _, c := range []struct {
		name  string
		pools []pool
	}{{"rails-all", pools}, {"rails-two", pools[:2]}} {
		pod := e.devicePod(ns, c.name, c.pools[0].name, 1)
		for _, p := range c.pools[1:] {
			pod.Spec.Containers[0].Resources.Limits[e.resource(p.name)] = *resource.NewQuantity(1, resource.DecimalSI)
		}
		e.createPod(t, pod)
		e.waitRunning(t, ns, c.name)
		l := e.waitLog(t, ns, c.name, 1)
		var held []string
		for _, p := range c.pools {
			d := l.env["KUBE_RDMA_"+envName(p.name)+"_RDMA_DEVICES"]
			if d == "" || strings.Contains(d, ",") {
				t.Fatalf("pod %s: KUBE_RDMA_%s_RDMA_DEVICES=%q, want one device", c.name, envName(p.name), d)
			}
			held = append(held, d)
		}
		slices.Sort(held)
		want := strings.Join(held, ",")
		hca := strings.Split(strings.TrimPrefix(l.env["NCCL_IB_HCA"], "="), ",")
		slices.Sort(hca)
		t.Logf("pod %s (%d pools): devices %s; NCCL_IB_HCA=%s UCX_NET_DEVICES=%s NCCL_IB_GID_INDEX=%q", c.name, len(c.pools), want,
			l.env["NCCL_IB_HCA"], l.env["UCX_NET_DEVICES"], l.env["NCCL_IB_GID_INDEX"])
		if !strings.HasPrefix(l.env["NCCL_IB_HCA"], "=") || strings.Join(hca, ",") != want {
			t.Errorf("pod %s: NCCL_IB_HCA=%q, want =%s: every device of its %d NCCL pools", c.name, l.env["NCCL_IB_HCA"], want, len(c.pools))
		}
		ucx := strings.Split(ucxDevices(l.env["UCX_NET_DEVICES"]), ",")
		slices.Sort(ucx)
		if got := strings.Join(slices.Compact(ucx), ","); got != want {
			t.Errorf("pod %s: UCX_NET_DEVICES=%q names %s, want the ports of %s", c.name, l.env["UCX_NET_DEVICES"], got, want)
		}
		var out string
		err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
			out, _ = e.kubectlRDMA(t, "doctor", "-n", ns, c.name)
			if got := doctorLines(out)["in container: NCCL environment matches the allocation"]; !strings.HasPrefix(got, "PASS") {
				return fmt.Errorf("doctor's NCCL check: %q", got)
			}
			return nil
		})
		if err != nil {
			t.Errorf("pod %s: %v\n%s", c.name, err, out)
		}
		e.appendReport(t, fmt.Sprintf("rails: a pod with one device of each of %d NCCL pools (NRI on) got NCCL_IB_HCA=%s UCX_NET_DEVICES=%s",
			len(c.pools), l.env["NCCL_IB_HCA"], l.env["UCX_NET_DEVICES"]))
		e.deletePod(t, ns, c.name) // the next pod asks for the same rails
	}
	e.waitNodeState(t, "the rail pools reported as a configuration problem", func(s *v1alpha1.RDMANodeState) error {
		for _, m := range s.Status.ConfigErrors {
			if strings.Contains(m, "set NCCL's variables") && strings.Contains(m, `"`+pools[0].name+`"`) {
				return nil
			}
		}
		return fmt.Errorf("configErrors %q name no NCCL pools", s.Status.ConfigErrors)
	})
}
