package kubectlrdma

import (
	"cmp"
	"context"
	"fmt"
	"maps"
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
	// netdevs are the devices' netdevs on the node.
	netdevs []string
	// attached are those the CNI plugin attached to the pod, with their
	// names in the pod.
	attached []v1alpha1.AttachedDevice
	// nccl are the devices of the pools that set NCCL's variables, and
	// ncclPools those pools; others the pools that do not.
	nccl              []v1alpha1.Device
	ncclPools, others []string
}

// podNetdevs are the netdevs the CNI plugin moved into the pod, by their
// names there.
func (a containerAlloc) podNetdevs() []string {
	var out []string
	for _, d := range a.attached {
		out = append(out, d.PodNetdev)
	}
	return out
}

// podName is dev's name in the pod: a soft-RoCE device the CNI plugin
// re-created there has another.
func (a containerAlloc) podName(dev string) string {
	for _, d := range a.attached {
		if d.RDMADevice == dev && d.PodRDMADevice != "" {
			return d.PodRDMADevice
		}
	}
	return dev
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
		pi := slices.IndexFunc(s.Status.Pools, func(p v1alpha1.Pool) bool { return p.Resource == a.Resource })
		nccl := pi < 0 || !s.Status.Pools[pi].NoNCCL
		pool := strings.TrimPrefix(a.Resource, resourcePrefix)
		if pi >= 0 {
			pool = s.Status.Pools[pi].Name
		}
		if nccl && !slices.Contains(out[i].ncclPools, pool) {
			out[i].ncclPools = append(out[i].ncclPools, pool)
		} else if !nccl && !slices.Contains(out[i].others, pool) {
			out[i].others = append(out[i].others, pool)
		}
		for _, name := range a.RDMADevices {
			if d := device(s, name); d != nil {
				out[i].devices = append(out[i].devices, *d)
				if nccl {
					out[i].nccl = append(out[i].nccl, *d)
				}
			}
		}
		out[i].netdevs = append(out[i].netdevs, a.Netdevs...)
		out[i].attached = append(out[i].attached, a.Attached...)
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
		var names []string
		for _, d := range a.devices {
			names = append(names, a.podName(d.Name))
		}
		out, err := ex.Exec(ctx, pod.Namespace, pod.Name, a.container, []string{"sh", "-c", containerScript(a.podNetdevs(), names)})
		if err != nil {
			checks = append(checks, Check{Name: "in container " + a.container + ": exec", Verdict: Fail, Detail: err.Error(),
				Fix: "the in-container checks need create on pods/exec and /bin/sh in the image; --no-exec skips them"})
			continue
		}
		v := parseContainerView(out)
		for _, c := range []Check{devNodesCheck(v), netdevCheck(v, a.podNetdevs()), gidCheck(v, a, s.Status.RDMANetnsMode),
			memlockCheck(v), ncclCheck(v, a)} {
			c.Name = "in container " + a.container + ": " + c.Name
			checks = append(checks, c)
		}
	}
	return checks
}

func devNodesCheck(v containerView) Check {
	c := Check{Name: containerCheckNames[0], Verdict: Pass, Detail: strings.Join(v.devOK, ",") + " open read-write"}
	if len(v.devErr) > 0 {
		nodes := slices.Sorted(maps.Keys(v.devErr))
		var details []string
		for _, n := range nodes {
			details = append(details, n+": "+v.devErr[n])
		}
		c.Verdict, c.Detail = Fail, "cannot open "+strings.Join(details, "; ")
		c.Fix = openFix(v.devErr[nodes[0]])
		return c
	}
	if len(v.devOK) == 0 {
		c.Verdict, c.Detail = Fail, "no /dev/infiniband/uverbs* in the container"
		c.Fix = "the kubelet mounts them with the allocation: check this container is the one whose limits ask for the resource"
	}
	return c
}

// openFix says what an open(2) error of a device node means here.
func openFix(msg string) string {
	switch m := strings.ToLower(msg); {
	case strings.Contains(m, "not permitted"): // EPERM: the device cgroup
		return "the device cgroup does not allow them: was the pod started before the daemon served its resource? recreate the pod"
	case strings.Contains(m, "permission denied"): // EACCES: the node's file mode
		return "the device node's mode does not let the container's user open it: give the node's /dev/infiniband/uverbs* mode 0666 (udev) or run the container as a user that may"
	case strings.Contains(m, "no such device"): // ENXIO, ENODEV: nothing behind the node
		return "the device node is there but no driver answers behind it on the node (ib_uverbs not loaded, the device removed or reset?): kubectl rdma doctor node/NODE, and the node's dmesg"
	}
	return "see the node's dmesg and the device plugin's log"
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

func gidCheck(v containerView, a containerAlloc, netnsMode string) Check {
	c := Check{Name: containerCheckNames[2], Verdict: Skip, Detail: "no Ethernet (RoCE) device allocated"}
	var ok []string
	for _, d := range a.devices {
		if d.LinkLayer != "Ethernet" {
			continue
		}
		name := a.podName(d.Name)
		idx := v.roceV2(name)
		switch {
		case !v.rdma[name]:
			c.Verdict, c.Detail = Fail, fmt.Sprintf("the container does not see %s (/sys/class/infiniband/%s missing)", name, name)
			exclusive := "in exclusive RDMA netns mode a device is seen only in the netns it was moved to, which the kube-rdma CNI plugin does: is the pod attached to a network of the plugin? see the plugin's log on the node"
			shared := "in shared RDMA netns mode every netns sees the node's devices: the node's kernel has no " + name + " now (driver unloaded, device removed?): kubectl rdma doctor node/NODE"
			switch netnsMode {
			case "exclusive":
				c.Fix = exclusive
			case "shared":
				c.Fix = shared
			default:
				c.Fix = "the node's RDMA netns mode is " + cmp.Or(netnsMode, "not in its state") + "; " + exclusive + "; " + shared
			}
			return c
		case len(idx) == 0:
			c.Verdict, c.Detail = Fail, name+" has no RoCE v2 GID in the container"
			c.Fix = "a RoCE v2 GID appears when the device's netdev has an IP address: see the netdev check"
			return c
		}
		ok = append(ok, fmt.Sprintf("%s: RoCE v2 at index %s", name, joinInts(idx)))
	}
	if len(ok) > 0 {
		c.Verdict, c.Detail = Pass, strings.Join(ok, "; ")
	}
	return c
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func memlockCheck(v containerView) Check {
	c := Check{Name: containerCheckNames[3], Verdict: Pass, Detail: v.memlock}
	main := v.mainLock
	if n, err := strconv.ParseUint(main, 10, 64); err == nil {
		main = strconv.FormatUint(n/1024, 10)
	}
	switch {
	case v.memlock == "unlimited":
	case main == "unlimited":
		// The memlock hook raised the container's first process (the
		// workload and what it starts); a kubectl exec'd process gets the
		// runtime's limit unless NRI set it in the container's spec.
		c.Detail = "unlimited for the container's processes; " + v.memlock + " KiB for processes started with kubectl exec (the runtime's limit: with nri.enabled they get the pool's too)"
	default:
		c.Verdict, c.Detail = Warn, "locked memory limited to "+v.memlock+" KiB"
		if main != "" && main != v.memlock {
			c.Detail += " (" + main + " KiB for the container's first process)"
		}
		c.Fix = "RDMA pins its buffers: keep the chart's devicePlugin.memlockHookDir set with CDI on in the runtime (the pools' CDI specs then raise RLIMIT_MEMLOCK of containers with our devices), turn on nri.enabled (needs NRI in the runtime; covers kubectl exec'd processes too), or raise the runtime's own limit for every container (containerd's unit LimitMEMLOCK=infinity)"
	}
	return c
}

// ncclCheck compares NCCL_IB_HCA with the devices of the container's pools
// that set NCCL's variables (by their names in the pod; pools with nccl:
// false name theirs in KUBE_RDMA_<POOL>_* only), NCCL_IB_GID_INDEX with
// the RoCE v2 GIDs the container sees (the state's index when it sees none),
// UCX_NET_DEVICES, when set (a daemon before it set none), with the same
// devices, and UCX_IB_GID_INDEX, when set, with NCCL_IB_GID_INDEX (the agent
// sets both to one index) or else the RoCE v2 GIDs.
func ncclCheck(v containerView, a containerAlloc) Check {
	c := Check{Name: containerCheckNames[4], Verdict: Pass}
	if len(a.nccl) == 0 {
		c.Verdict, c.Detail = Skip, "none of the container's pools ("+strings.Join(a.others, ", ")+") sets NCCL's variables (nccl: false)"
		return c
	}
	var names []string
	valid := map[int]bool{}
	for _, d := range a.nccl {
		name := a.podName(d.Name)
		names = append(names, name)
		for _, i := range v.roceV2(name) {
			valid[i] = true
		}
		if len(v.roceV2(name)) == 0 {
			for _, p := range d.Ports {
				if p.RoCEv2GIDIndex != nil {
					valid[*p.RoCEv2GIDIndex] = true
				}
			}
		}
	}
	hca := strings.Split(strings.TrimPrefix(v.hca, "="), ",")
	slices.Sort(hca)
	slices.Sort(names)
	gid, gidErr := strconv.Atoi(v.gidIndex)
	switch {
	case v.hca == "<unset>":
		c.Verdict, c.Detail = Warn, "NCCL_IB_HCA is unset: NCCL may use any HCA it sees"
		c.Fix = "the device plugin sets NCCL_IB_HCA; an env in the pod spec or image must not unset it"
	case !slices.Equal(hca, names) && len(a.ncclPools) > 1:
		// Each pool's Allocate named its own devices and the kubelet kept
		// one value: two NCCL pools with devices on the node (the daemon
		// reports them as a configuration problem).
		c.Verdict = Fail
		c.Detail = fmt.Sprintf("NCCL_IB_HCA=%s, but the container has devices of pools %s, each of which sets NCCL_IB_HCA to its own devices (%s in all): the kubelet kept one pool's value, so NCCL uses only its NICs",
			v.hca, strings.Join(a.ncclPools, " and "), strings.Join(names, ","))
		c.Fix = "put the NICs NCCL uses (every rail) in one pool and give the other pools nccl: false in the chart's config.pools, upgrade the release, then recreate the pod"
	case !slices.Equal(hca, names):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("NCCL_IB_HCA=%s, allocated %s", v.hca, strings.Join(names, ","))
		c.Fix = "remove NCCL_IB_HCA from the pod spec: the device plugin sets it to the allocation"
	case v.gidIndex != "<unset>" && len(valid) > 0 && (gidErr != nil || !valid[gid]):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("NCCL_IB_GID_INDEX=%s, the allocated ports' RoCE v2 GIDs are at %s", v.gidIndex, joinInts(slices.Sorted(maps.Keys(valid))))
		c.Fix = "remove NCCL_IB_GID_INDEX from the pod spec: the device plugin sets it"
	case v.ucx != "" && v.ucx != "<unset>" && !slices.Equal(ucxDevices(v.ucx), names):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("UCX_NET_DEVICES=%s, allocated %s (UCX names each port as device:port)", v.ucx, strings.Join(names, ","))
		c.Fix = "remove UCX_NET_DEVICES from the pod spec: the device plugin sets it to the allocation's ports"
	case v.ucxGID != "" && v.ucxGID != "<unset>" && v.gidIndex != "<unset>" && v.ucxGID != v.gidIndex:
		c.Verdict, c.Detail = Fail, fmt.Sprintf("UCX_IB_GID_INDEX=%s, NCCL_IB_GID_INDEX=%s: UCX and NCCL use different GIDs of the port", v.ucxGID, v.gidIndex)
		c.Fix = "remove UCX_IB_GID_INDEX from the pod spec: the device plugin sets it with NCCL_IB_GID_INDEX"
	case v.ucxGID != "" && v.ucxGID != "<unset>" && v.gidIndex == "<unset>" && len(valid) > 0 && !validIndex(v.ucxGID, valid):
		c.Verdict, c.Detail = Fail, fmt.Sprintf("UCX_IB_GID_INDEX=%s, the allocated ports' RoCE v2 GIDs are at %s", v.ucxGID, joinInts(slices.Sorted(maps.Keys(valid))))
		c.Fix = "remove UCX_IB_GID_INDEX from the pod spec, or set it to one of those indexes"
	default:
		c.Detail = "NCCL_IB_HCA=" + v.hca
		if v.gidIndex != "<unset>" {
			c.Detail += ", NCCL_IB_GID_INDEX=" + v.gidIndex
		}
		if v.ucxGID != "" && v.ucxGID != "<unset>" {
			c.Detail += ", UCX_IB_GID_INDEX=" + v.ucxGID
		}
		if v.ucx != "" && v.ucx != "<unset>" {
			c.Detail += ", UCX_NET_DEVICES=" + v.ucx
		}
	}
	return c
}

// validIndex is whether s is one of the indexes in valid.
func validIndex(s string, valid map[int]bool) bool {
	i, err := strconv.Atoi(s)
	return err == nil && valid[i]
}

// ucxDevices is the sorted device names of a UCX_NET_DEVICES value
// (device:port,...), each once; an entry without a port is kept whole, so
// it matches no device.
func ucxDevices(v string) []string {
	var names []string
	for _, e := range strings.Split(v, ",") {
		name, port, ok := strings.Cut(e, ":")
		if !ok || port == "" {
			name = e + " (no port)"
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}
