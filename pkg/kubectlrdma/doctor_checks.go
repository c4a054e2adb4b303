package kubectlrdma

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

const daemonPods = "kubectl get pods -A -l app.kubernetes.io/name=kube-rdma -o wide"

// nodeChecks checks node and its state s (nil with stateErr when GetState
// failed). Errors other than a missing or newer state are returned.
func nodeChecks(node *corev1.Node, s *v1alpha1.RDMANodeState, stateErr error, now time.Time, staleAfter time.Duration) ([]Check, error) {
	switch {
	case errors.Is(stateErr, ErrNoDaemon):
		return []Check{{Name: "daemon state", Verdict: Fail, Detail: "no RDMANodeState for node " + node.Name,
			Fix: "is the kube-rdma daemon running on the node (nodeSelector, tolerations)? " + daemonPods}}, nil
	case errors.Is(stateErr, ErrNewerState):
		return []Check{{Name: "daemon state", Verdict: Fail, Detail: stateErr.Error(), Fix: "install the kubectl-rdma of the daemon's release"}}, nil
	case stateErr != nil:
		return nil, stateErr
	}
	st := &s.Status
	checks := []Check{{Name: "daemon state", Verdict: Pass,
		Detail: fmt.Sprintf("RDMANodeState %s written by %s (state version %d)", s.Name, fromVersion(s), st.StateVersion)}}
	fresh := Check{Name: "daemon state fresh", Verdict: Pass, Detail: "updated " + age(st.LastUpdate.Time, now)}
	if a := now.Sub(st.LastUpdate.Time); st.LastUpdate.IsZero() || a > staleAfter {
		fresh.Verdict = Warn
		fresh.Detail = fmt.Sprintf("last updated %s, longer than --stale-after %s", age(st.LastUpdate.Time, now), duration.HumanDuration(staleAfter))
		fresh.Fix = "the daemon may be stuck or gone: " + daemonPods + ", then its logs"
	}
	checks = append(checks, fresh)
	if len(st.ConfigErrors) == 0 {
		checks = append(checks, Check{Name: "pools file", Verdict: Pass, Detail: "no errors"})
	}
	for _, e := range st.ConfigErrors {
		checks = append(checks, Check{Name: "pools file", Verdict: Fail, Detail: e, Fix: "correct the chart's pools values and upgrade the release"})
	}
	for _, p := range st.Pools {
		checks = append(checks, advertised(node, p))
	}
	checks = append(checks, healthChecks(st.Devices, nil)...)
	for _, p := range st.Pools {
		checks = append(checks, netnsCheck(st.RDMANetnsMode, p))
	}
	checks = append(checks, cniCheck(st))
	return append(checks, givenUpChecks(st.GivenUp, now)...), nil
}

// givenUpChecks warns once per NIC the CNI plugin gave up on (status.givenUp:
// a pod's attachment ended without it), so that an operator looks at the
// device: it rejoins its pool only once its netdev is back on the host.
func givenUpChecks(given []v1alpha1.DeviceGivenUp, now time.Time) []Check {
	var checks []Check
	for _, g := range given {
		pod := "a pod"
		if g.Pod != "" {
			pod = "pod " + g.Namespace + "/" + g.Pod
		}
		why := "its netdev did not come back from the pod's network namespace in time"
		switch g.Reason {
		case "function-gone":
			why = "its PCI function or auxiliary device " + g.Function + " left the node"
		case "vanished":
			why = "its netdev was in neither the pod's network namespace nor the host's (removed while the pod had it)"
		}
		checks = append(checks, Check{Name: "device " + g.Device + " given up", Verdict: Warn,
			Detail: fmt.Sprintf("%s of %s gave up %s (netdev %s, %s) %s: %s", g.Command, pod, g.Device, g.Netdev, g.Function, age(g.Time.Time, now), why),
			Fix:    "check the NIC on the node (its driver's messages in the kernel log, lspci, rdma link); it rejoins its pool once its netdev is back on the host"})
	}
	return checks
}

// advertised compares a pool with the node's allocatable.
func advertised(node *corev1.Node, p v1alpha1.Pool) Check {
	c := Check{Name: "pool " + p.Name + " advertised", Verdict: Pass}
	q, ok := node.Status.Allocatable[corev1.ResourceName(p.Resource)]
	switch {
	case !ok:
		c.Verdict, c.Detail = Fail, fmt.Sprintf("node allocatable has no %s", p.Resource)
		c.Fix = "the daemon has not registered the pool with the kubelet: see its logs (" + daemonPods + ")"
	case p.Capacity == 0:
		c.Verdict, c.Detail = Warn, fmt.Sprintf("%s has no devices", p.Resource)
		c.Fix = "the pool's selector matches no RDMA device on this node: kubectl rdma topo " + node.Name
	case q.Value() != int64(p.Allocatable):
		c.Verdict = Warn
		c.Detail = fmt.Sprintf("node allocatable %s=%d, the daemon says %d allocatable", p.Resource, q.Value(), p.Allocatable)
		c.Fix = "the kubelet's node status lags the daemon; if it persists, see the kubelet's and the daemon's logs"
	default:
		c.Detail = fmt.Sprintf("%s=%d allocatable (%d allocated of %d)", p.Resource, p.Allocatable, p.Allocated, p.Capacity)
	}
	return c
}

// healthChecks passes when every device (every one named in only, if not
// nil) is healthy, and fails once per unhealthy one.
func healthChecks(devices []v1alpha1.Device, only []string) []Check {
	var checks []Check
	n := 0
	for _, d := range devices {
		if only != nil && !slices.Contains(only, d.Name) {
			continue
		}
		n++
		if !d.Healthy {
			checks = append(checks, Check{Name: "device " + d.Name + " healthy", Verdict: Fail, Detail: portStates(d.Ports),
				Fix: "check the link (cable, switch port, subnet manager): rdma link show " + d.Name + " on the node"})
		}
	}
	if len(checks) == 0 {
		return []Check{{Name: "devices healthy", Verdict: Pass, Detail: fmt.Sprintf("%d of %d healthy", n, n)}}
	}
	return checks
}

// netnsCheck: an exclusive pool isolates devices only in exclusive RDMA
// netns mode; a shared pool needs shared mode.
func netnsCheck(mode string, p v1alpha1.Pool) Check {
	c := Check{Name: "netns mode for pool " + p.Name, Verdict: Pass, Detail: fmt.Sprintf("%s pool, %s netns mode", p.Mode, mode)}
	switch {
	case p.Mode == "shared" && mode == "exclusive":
		c.Verdict, c.Fix = Fail, "a shared pool needs RDMA netns mode shared (rdma system set netns shared), or make the pool exclusive"
	case p.Mode == "exclusive" && mode == "shared":
		c.Verdict, c.Fix = Warn, "in shared mode every pod sees every RDMA device: rdma system set netns exclusive on the node for isolation"
	case mode != "shared" && mode != "exclusive":
		c.Verdict, c.Fix = Warn, "the daemon could not read the RDMA netns mode (no RDMA netlink?): see its logs"
	}
	return c
}

// podPreChecks need only the pod, its kube-rdma resources res and the claims of kube-rdma's
// DRA driver prepared for it (podDRAClaims).
func podPreChecks(pod *corev1.Pod, res, claims []string) []Check {
	checks := []Check{{Name: "pod scheduled", Verdict: Pass, Detail: "on node " + pod.Spec.NodeName + ", phase " + string(pod.Status.Phase)}}
	if pod.Spec.NodeName == "" {
		checks[0] = Check{Name: "pod scheduled", Verdict: Fail, Detail: "not scheduled (phase " + string(pod.Status.Phase) + ")",
			Fix: "kubectl describe pod " + pod.Name + ": an event says which resource no node has"}
	}
	switch {
	case len(res) > 0:
		return append(checks, Check{Name: "requests RDMA", Verdict: Pass, Detail: strings.Join(res, ", ")})
	case len(claims) > 0:
		return append(checks, Check{Name: "requests RDMA", Verdict: Pass, Detail: "DRA claims of " + draDriverName + ": " + strings.Join(claims, ", ")})
	}
	return append(checks, Check{Name: "requests RDMA", Verdict: Fail, Detail: "no container asks for a " + resourcePrefix + "* resource, and no claim of " + draDriverName + " is prepared for the pod",
		Fix: "add resources.limits: {" + resourcePrefix + "POOL: 1} to the container that uses RDMA, or a ResourceClaim of a kube-rdma DeviceClass"})
}

// cniCheck says how the chart set up the kube-rdma CNI plugin on the node,
// and whether that suits the node: without it, the netdevs of exclusive
// pools' devices stay on the host, and in exclusive RDMA netns mode the
// devices themselves are unusable in pods.
func cniCheck(st *v1alpha1.RDMANodeStateStatus) Check {
	c := Check{Name: "CNI plugin", Verdict: Pass}
	if st.CNI == nil {
		c.Verdict, c.Detail = Skip, "the daemon does not report it (an older daemon, or not run by the chart)"
		return c
	}
	exclusive := slices.ContainsFunc(st.Pools, func(p v1alpha1.Pool) bool { return p.Mode == "exclusive" })
	switch st.CNI.Mode {
	case "chained", "multus":
		c.Detail = fmt.Sprintf("installed by the chart (%s), %d attachment(s) on the node", st.CNI.Mode, st.CNI.Attachments)
	case "none":
		c.Verdict, c.Detail = Warn, "the binary is installed, no network configured (cni.mode none)"
		c.Fix = "pods get netdevs only through networks you configure: cni.mode chained or multus (docs/cni.md)"
	default:
		c.Detail = "not installed by the chart"
		switch {
		case exclusive && st.RDMANetnsMode == "exclusive":
			c.Verdict = Fail
			c.Detail += ": in exclusive RDMA netns mode an exclusive pool's device is usable only in the netns the plugin moves it to"
			c.Fix = "set cni.install=true with cni.mode chained or multus and upgrade the release"
		case exclusive:
			c.Verdict = Warn
			c.Detail += ": the netdevs of exclusive pools' devices stay on the host"
			c.Fix = "set cni.install=true with cni.mode chained or multus, so that pods get their NICs' netdevs"
		}
	}
	return c
}

// cniAttachmentCheck: each of the pod's allocations of an exclusive pool
// whose devices have netdevs was attached to the pod by the CNI plugin (the
// state's attached devices).
func cniAttachmentCheck(pod *corev1.Pod, s *v1alpha1.RDMANodeState) (Check, bool) {
	c := Check{Name: "CNI attachment", Verdict: Pass}
	st := &s.Status
	var done, missing []string
	var notChained []string
	for _, a := range st.Allocations {
		if a.Namespace != pod.Namespace || a.Pod != pod.Name || len(a.Netdevs) == 0 {
			continue
		}
		i := slices.IndexFunc(st.Pools, func(p v1alpha1.Pool) bool { return p.Resource == a.Resource })
		if i < 0 || st.Pools[i].Mode != "exclusive" {
			continue
		}
		// The chained entry attaches the devices of its pool only: the
		// others are not the plugin's to attach, whatever it did.
		if st.CNI != nil && st.CNI.Mode == "chained" && st.CNI.ChainedPool != "" && st.Pools[i].Name != st.CNI.ChainedPool {
			if len(a.Attached) == 0 {
				notChained = append(notChained, a.Resource)
			}
			continue
		}
		if len(a.Attached) == 0 {
			missing = append(missing, a.Resource)
		}
		for _, d := range a.Attached {
			done = append(done, d.RDMADevice+" as "+d.PodNetdev)
		}
	}
	if len(done)+len(missing) == 0 || st.CNI == nil {
		return c, false
	}
	c.Detail = strings.Join(done, ", ")
	if len(notChained) > 0 {
		c.Detail = strings.TrimPrefix(c.Detail+"; "+strings.Join(notChained, ", ")+": not the chained pool ("+st.CNI.ChainedPool+"), not attached by design", "; ")
	}
	if len(missing) == 0 {
		return c, true
	}
	// A chained entry attaches the devices of one pool (cni.chained.pool):
	// when it attached some of the pod's, the others are of pools it does
	// not attach, and nothing is missing.
	if st.CNI.Mode == "chained" && len(done) > 0 {
		c.Detail += "; " + strings.Join(missing, ", ") + ": not the chained pool, not attached by design"
		return c, true
	}
	c.Verdict, c.Detail = Fail, "the kube-rdma CNI plugin attached none of the pod's "+strings.Join(missing, ", ")+" devices"
	switch st.CNI.Mode {
	case "multus":
		c.Fix = "name a NetworkAttachmentDefinition of that pool in the pod's k8s.v1.cni.cncf.io/networks annotation"
	case "chained":
		c.Fix = "chained mode attaches the devices of cni.chained.pool only: is the pod's pool that one? a pod started before the plugin was chained keeps none (recreate it)"
	default:
		c.Fix = "the chart does not configure the plugin (cni.mode " + st.CNI.Mode + "): set cni.install=true with cni.mode chained or multus"
		if st.RDMANetnsMode != "exclusive" {
			c.Verdict = Warn
		}
	}
	return c, true
}
