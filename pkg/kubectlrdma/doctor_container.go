package kubectlrdma

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

var containerCheckNames = []string{"/dev/infiniband device nodes openable", "netdev up with an address",
	"RoCE v2 GID", "ulimit -l (locked memory)", "NCCL environment matches the allocation"}

func skipContainer(why string) []Check {
	checks := make([]Check, len(containerCheckNames))
	for i, n := range containerCheckNames {
		checks[i] = Check{Name: "in container: " + n, Verdict: Skip, Detail: why}
	}
	return checks
}

// containerAlloc is what one container got of kube-rdma's resources.
type containerAlloc struct {
	container string
	devices   []v1alpha1.Device
	netdevs   []string
}

func containerAllocs(pod *corev1.Pod, s *v1alpha1.RDMANodeState) []containerAlloc {
	var out []containerAlloc
	for _, a := range s.Status.Allocations {
		if a.Namespace != pod.Namespace || a.Pod != pod.Name || !strings.HasPrefix(a.Resource, resourcePrefix) {
			continue
		}
		i := slices.IndexFunc(out, func(c containerAlloc) bool { return c.container == a.Container })
		if i < 0 {
			out, i = append(out, containerAlloc{container: a.Container}), len(out)
		}
		for _, name := range a.RDMADevices {
			if d := device(s, name); d != nil {
				out[i].devices = append(out[i].devices, *d)
			}
		}
		out[i].netdevs = append(out[i].netdevs, a.Netdevs...)
	}
	return out
}

// containerChecks exec a probe script in each container that has kube-rdma
// devices and check what it sees against the allocation.
func (o *Options) containerChecks(ctx context.Context, pod *corev1.Pod, s *v1alpha1.RDMANodeState, noExec bool) []Check {
	switch {
	case noExec:
		return skipContainer("--no-exec")
	case s == nil || pod.Spec.NodeName == "":
		return skipContainer("no allocation to check")
	case pod.Status.Phase != corev1.PodRunning:
		return skipContainer("pod is " + string(pod.Status.Phase) + ", not Running")
	}
	allocs := containerAllocs(pod, s)
	if len(allocs) == 0 {
		return skipContainer("no allocation to check")
	}
	ex, err := o.NewExecer(o.flags)
	if err != nil {
		return []Check{{Name: "in container: exec", Verdict: Fail, Detail: err.Error()}}
	}
	var checks []Check
	for _, a := range allocs {
		var gids []gidProbe
		for _, d := range a.devices {
			for _, p := range d.Ports {
				if p.RoCEv2GIDIndex != nil {
					gids = append(gids, gidProbe{dev: d.Name, port: p.Port, idx: *p.RoCEv2GIDIndex})
				}
			}
		}
		out, err := ex.Exec(ctx, pod.Namespace, pod.Name, a.container, []string{"sh", "-c", containerScript(a.netdevs, gids)})
		if err != nil {
			checks = append(checks, Check{Name: "in container " + a.container + ": exec", Verdict: Fail, Detail: err.Error(),
				Fix: "the in-container checks need create on pods/exec and /bin/sh in the image; --no-exec skips them"})
			continue
		}
		v := parseContainerView(out)
		for _, c := range []Check{devNodesCheck(v), netdevCheck(v, a.netdevs), gidCheck(v, a.devices), memlockCheck(v), ncclCheck(v, a.devices)} {
			c.Name = "in container " + a.container + ": " + c.Name
			checks = append(checks, c)
		}
	}
	return checks
}

func devNodesCheck(v containerView) Check {
	c := Check{Name: containerCheckNames[0], Verdict: Pass, Detail: strings.Join(v.devOK, ",") + " open read-write"}
	switch {
	case len(v.devDenied) > 0:
		c.Verdict, c.Detail = Fail, "cannot open "+strings.Join(v.devDenied, ",")
		c.Fix = "the device cgroup does not allow them: was the pod started before the daemon served its resource? recreate the pod"
	case len(v.devOK) == 0:
		c.Verdict, c.Detail = Fail, "no /dev/infiniband/uverbs* in the container"
		c.Fix = "the kubelet mounts them with the allocation: check this container is the one whose limits ask for the resource"
	}
	return c
}

func netdevCheck(v containerView, netdevs []string) Check {
	c := Check{Name: containerCheckNames[1], Verdict: Pass}
	if len(netdevs) == 0 {
		c.Verdict, c.Detail = Skip, "no netdev was moved into the pod for this allocation"
		return c
	}
	var ok []string
	for _, n := range netdevs {
		st := v.operstate[n]
		switch {
		case st != "up" && st != "unknown":
			c.Verdict, c.Detail = Fail, fmt.Sprintf("%s is %s", n, st)
			c.Fix = "the CNI plugin moves and raises it: see the pod's events and the CNI plugin's log on the node"
			return c
		case len(v.addrs[n]) == 0 && !v.noIP:
			c.Verdict, c.Detail = Fail, n+" has no address"
			c.Fix = "the network attachment's IPAM gives it: check the NetworkAttachmentDefinition's ipam"
			return c
		}
		ok = append(ok, n+" "+st+" "+strings.Join(v.addrs[n], ","))
	}
	c.Detail = strings.Join(ok, "; ")
	if v.noIP {
		c.Verdict, c.Detail = Warn, c.Detail+"(no ip command in the image: addresses not checked)"
	}
	return c
}

func gidCheck(v containerView, devices []v1alpha1.Device) Check {
	c := Check{Name: containerCheckNames[2], Verdict: Skip, Detail: "no Ethernet (RoCE) device allocated"}
	var ok []string
	for _, d := range devices {
		if d.LinkLayer != "Ethernet" {
			continue
		}
		t, probed := v.gidType[d.Name]
		switch {
		case !probed:
			c.Verdict, c.Detail = Fail, d.Name+" has no RoCE v2 GID on the node"
			c.Fix = "a RoCE v2 GID needs an IP address on the device's netdev"
			return c
		case t != "RoCE v2":
			c.Verdict, c.Detail = Fail, fmt.Sprintf("%s's RoCE v2 GID reads %q in the container", d.Name, t)
			c.Fix = "the RDMA device is not in the pod's netns, or its GID table changed: see the CNI plugin's log"
			return c
		}
		ok = append(ok, d.Name)
	}
	if len(ok) > 0 {
		c.Verdict, c.Detail = Pass, strings.Join(ok, ",")+": RoCE v2"
	}
	return c
}

func memlockCheck(v containerView) Check {
	c := Check{Name: containerCheckNames[3], Verdict: Pass, Detail: v.memlock}
	if v.memlock != "unlimited" {
		c.Verdict, c.Detail = Warn, "locked memory limited to "+v.memlock+" KiB"
		c.Fix = "RDMA pins its buffers: set the runtime's memlock limit to unlimited (containerd's unit LimitMEMLOCK=infinity)"
	}
	return c
}

func ncclCheck(v containerView, devices []v1alpha1.Device) Check {
	c := Check{Name: containerCheckNames[4], Verdict: Pass}
	var names []string
	gidIdx := -1
	for _, d := range devices {
		names = append(names, d.Name)
		for _, p := range d.Ports {
			if p.RoCEv2GIDIndex != nil {
				gidIdx = *p.RoCEv2GIDIndex
			}
		}
	}
	hca := strings.Split(strings.TrimPrefix(v.hca, "="), ",")
	slices.Sort(hca)
	slices.Sort(names)
	switch {
	case v.hca == "<unset>":
		c.Verdict, c.Detail = Warn, "NCCL_IB_HCA is unset: NCCL may use any HCA it sees"
		c.Fix = "the device plugin sets NCCL_IB_HCA; an env in the pod spec or image must not unset it"
	case !slices.Equal(hca, names):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("NCCL_IB_HCA=%s, allocated %s", v.hca, strings.Join(names, ","))
		c.Fix = "remove NCCL_IB_HCA from the pod spec: the device plugin sets it to the allocation"
	case gidIdx >= 0 && v.gidIndex != strconv.Itoa(gidIdx):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("NCCL_IB_GID_INDEX=%s, the allocated port's RoCE v2 GID is %d", v.gidIndex, gidIdx)
		c.Fix = "remove NCCL_IB_GID_INDEX from the pod spec: the device plugin sets it"
	default:
		c.Detail = "NCCL_IB_HCA=" + v.hca
	}
	return c
}
