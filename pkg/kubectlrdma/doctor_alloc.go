package kubectlrdma

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// allocationChecks: each requested resource is a pool on the node, each
// container's allocation of it is in the state with as many devices as it
// asked for, and those devices are healthy.
func allocationChecks(pod *corev1.Pod, s *v1alpha1.RDMANodeState) []Check {
	var checks []Check
	var devices []string
	for _, c := range slices.Concat(pod.Spec.InitContainers, pod.Spec.Containers) {
		for name, q := range c.Resources.Limits {
			res := string(name)
			if !strings.HasPrefix(res, resourcePrefix) {
				continue
			}
			if !slices.ContainsFunc(s.Status.Pools, func(p v1alpha1.Pool) bool { return p.Resource == res }) {
				checks = append(checks, Check{Name: "pool for " + res, Verdict: Fail,
					Detail: fmt.Sprintf("container %s asks for %s, which no pool on node %s serves", c.Name, res, s.Name),
					Fix:    "use a resource kubectl rdma nodes lists for the node, or add the pool to the chart's values"})
				continue
			}
			ck, devs := containerAllocation(pod, c.Name, res, q.Value(), s)
			checks, devices = append(checks, ck), append(devices, devs...)
		}
	}
	slices.SortFunc(checks, func(a, b Check) int { return strings.Compare(a.Name, b.Name) })
	if len(devices) > 0 {
		for _, h := range healthChecks(s.Status.Devices, devices) {
			h.Name = "allocated " + h.Name
			checks = append(checks, h)
		}
		checks = append(checks, gpuLevelCheck(pod, s))
		if c, ok := cniAttachmentCheck(pod, s); ok {
			checks = append(checks, c)
		}
	}
	return append(checks, netdevsMissingChecks(pod, s)...)
}

func containerAllocation(pod *corev1.Pod, container, res string, want int64, s *v1alpha1.RDMANodeState) (Check, []string) {
	c := Check{Name: fmt.Sprintf("allocation %s %s", container, res)}
	i := slices.IndexFunc(s.Status.Allocations, func(a v1alpha1.Allocation) bool {
		return a.Namespace == pod.Namespace && a.Pod == pod.Name && a.Container == container && a.Resource == res
	})
	switch {
	case i < 0 && pod.Status.Phase == corev1.PodPending:
		c.Verdict, c.Detail = Warn, "no allocation yet: the pod is Pending"
		c.Fix = "the kubelet allocates when it starts the container: kubectl describe pod " + pod.Name
		return c, nil
	case i < 0 && stateOlderThan(s, pod):
		// The daemon writes the state at most every --node-state-interval:
		// a container that started after the last write is not in it yet.
		c.Verdict = Warn
		c.Detail = fmt.Sprintf("the node's state (written %s) is older than the pod's containers (started %s): the allocation of %s to container %s is not in it yet",
			s.Status.LastUpdate.UTC().Format(time.RFC3339), podStarted(pod).UTC().Format(time.RFC3339), res, container)
		c.Fix = "run doctor again in a few seconds (the daemon writes the state every few seconds, nodeState.interval)"
		return c, nil
	case i < 0:
		c.Verdict, c.Detail = Fail, fmt.Sprintf("the node's state has no allocation of %s to container %s", res, container)
		c.Fix = "the daemon's view of the kubelet lags or the pod started before the daemon: see the daemon's logs, recreate the pod"
		return c, nil
	}
	a := s.Status.Allocations[i]
	c.Verdict, c.Detail = Pass, fmt.Sprintf("%d device(s): %s", len(a.DeviceIDs), strings.Join(a.RDMADevices, ","))
	if int64(len(a.DeviceIDs)) != want {
		c.Verdict = Fail
		c.Detail = fmt.Sprintf("%d device(s) allocated, the container asks for %d", len(a.DeviceIDs), want)
		c.Fix = "the daemon's view of the kubelet lags: wait and retry, else see the daemon's logs"
	}
	return c, a.RDMADevices
}

// gpuLevelCheck: each of the pod's GPUs has an allocated NIC at PXB or
// closer, the paths on which NCCL uses GPUDirect RDMA by default
// (NCCL_NET_GDR_LEVEL); NCCL picks the closest NIC for each GPU, so the
// check is per GPU. Skip when the state has none of the pod's GPUs.
func gpuLevelCheck(pod *corev1.Pod, s *v1alpha1.RDMANodeState) Check {
	c := Check{Name: "GPU<->NIC PCIe level", Verdict: Skip, Detail: "no GPU of the pod in the node's state (" + GPUResource + ")"}
	nics, gpus := allocated(pod, s)
	if len(gpus) == 0 || len(nics) == 0 {
		return c
	}
	var parts, far []string
	for _, g := range gpus {
		best, nic := discovery.Level("?"), ""
		for _, n := range nics {
			if l := worstLevel(s, []NIC{n}, []PodGPU{g}); nic == "" || l.Rank() < best.Rank() {
				best, nic = l, n.Name
			}
		}
		part := fmt.Sprintf("GPU%d->%s %s", g.Index, nic, best)
		parts = append(parts, part)
		if best == "?" || best.Rank() > discovery.PXB.Rank() {
			far = append(far, part)
		}
	}
	c.Verdict, c.Detail = Pass, strings.Join(parts, ", ")
	if len(far) > 0 {
		c.Verdict, c.Detail = Warn, strings.Join(parts, ", ")+": farther than PXB, where NCCL turns GPUDirect RDMA off by default"
		c.Fix = "use NICs under the GPUs' PCIe switches: a pool with binding: gpuAligned binds them (docs/gpu-aligned.md); kubectl rdma topo " + s.Name + " shows the matrix"
	}
	return c
}

// podStarted is when the pod's last container started (its start time
// when none has).
func podStarted(pod *corev1.Pod) time.Time {
	var t time.Time
	if pod.Status.StartTime != nil {
		t = pod.Status.StartTime.Time
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if r := cs.State.Running; r != nil && r.StartedAt.After(t) {
			t = r.StartedAt.Time
		}
	}
	return t
}

// stateOlderThan reports whether the node state was written before the
// pod's last container started: it cannot hold all of its allocations.
func stateOlderThan(s *v1alpha1.RDMANodeState, pod *corev1.Pod) bool {
	started := podStarted(pod)
	return !started.IsZero() && s.Status.LastUpdate.Time.Before(started)
}
