package kubectlrdma

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's resource ID of a device a claim holds is the first CDI device the driver
// returned for it, else <driver>/<pool>/<device>. kube-rdma's driver returns its claim CDI
// device (claimrecord.CDIKind, "kube-rdma.io/claim=<claim UID>-<request>") with a request's first
// device and none with the others.
const (
	// draDriverName is the kube-rdma DRA driver's name (claimrecord.DriverName).
	draDriverName = "rdma.kube-rdma.io"
	// draCDIKind is the kind of its claims' CDI devices (claimrecord.CDIKind).
	draCDIKind = "kube-rdma.io/claim"
)

// ourClaimDevice reports whether the kubelet's resource ID id of a claim's device is one of
// kube-rdma's devices.
func ourClaimDevice(id string) bool {
	return strings.HasPrefix(id, draDriverName+"/") || strings.HasPrefix(id, draCDIKind+"=")
}

// DeviceHealth is the kubelet's health of one kube-rdma device a container holds, from the
// pod's status (containerStatuses[].allocatedResourcesStatus, written by kubelets with the
// ResourceHealthStatus feature: alpha in 1.34 and 1.35, on by default from 1.36).
type DeviceHealth struct {
	Container string `json:"container"`
	// Resource is the extended resource, or claim:<claim>[/<request>] for a DRA claim's device.
	Resource string `json:"resource"`
	// Device is the device plugin's device ID; for a DRA device, the claim's CDI device
	// (kube-rdma.io/claim=<claim UID>-<request>) or <driver>/<pool>/<device>.
	Device string `json:"device"`
	// Health is Healthy, Unhealthy or Unknown (the device's plugin or driver is gone).
	Health  string `json:"health"`
	Message string `json:"message,omitempty"`
}

// podHealth is the kubelet's health of the kube-rdma devices of pod: one entry per container
// and device (init containers first), and the worst of them (Unhealthy, then Unknown, then
// Healthy; "" when the kubelet reports none). resources are the pod's kube-rdma extended
// resources; a claim's device is kube-rdma's when its resource ID names the kube-rdma driver or
// its claims' CDI kind, so a GPU plugin's or a GPU claim's devices are left out.
func podHealth(pod *corev1.Pod, resources []string) (string, []DeviceHealth) {
	var out []DeviceHealth
	for _, cs := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		for _, rs := range cs.AllocatedResourcesStatus {
			name := string(rs.Name)
			claim := strings.HasPrefix(name, "claim:")
			if !claim && !slices.Contains(resources, name) {
				continue
			}
			for _, r := range rs.Resources {
				id := string(r.ResourceID)
				if claim && !ourClaimDevice(id) {
					continue
				}
				h := DeviceHealth{Container: cs.Name, Resource: name, Device: id, Health: string(r.Health)}
				if h.Health == "" {
					h.Health = string(corev1.ResourceHealthStatusUnknown)
				}
				if r.Message != nil {
					h.Message = *r.Message
				}
				out = append(out, h)
			}
		}
	}
	return worstHealth(out), out
}

// healthRank orders health from best to worst; a value the API does not define ranks as Unknown.
func healthRank(h string) int {
	switch corev1.ResourceHealthStatus(h) {
	case corev1.ResourceHealthStatusHealthy:
		return 0
	case corev1.ResourceHealthStatusUnhealthy:
		return 2
	}
	return 1
}

func worstHealth(hs []DeviceHealth) string {
	worst := ""
	for _, h := range hs {
		if worst == "" || healthRank(h.Health) > healthRank(worst) {
			worst = h.Health
		}
	}
	return worst
}

// healthCheck is doctor's check of the health the kubelet reports in the pod's status for its
// kube-rdma devices.
func healthCheck(pod *corev1.Pod, resources []string) Check {
	c := Check{Name: "device health (kubelet)"}
	worst, hs := podHealth(pod, resources)
	if worst == "" {
		c.Verdict, c.Detail = Skip, "the kubelet reports no health of the pod's kube-rdma devices (kubelets before 1.36 report it only with the ResourceHealthStatus feature gate on)"
		return c
	}
	var bad []string
	for _, h := range hs {
		if h.Health != string(corev1.ResourceHealthStatusHealthy) {
			s := h.Device + " of " + h.Container + " (" + h.Resource + "): " + h.Health
			if h.Message != "" {
				s += ", " + h.Message
			}
			bad = append(bad, s)
		}
	}
	if len(bad) == 0 {
		c.Verdict, c.Detail = Pass, pluralDevices(len(hs))+" Healthy"
		return c
	}
	c.Verdict, c.Detail = Warn, strings.Join(bad, "; ")
	c.Fix = "an Unhealthy device's port is down or gone (kubectl rdma doctor node/" + pod.Spec.NodeName +
		"); Unknown: its device plugin or DRA driver is not registered with the kubelet. The pod keeps the device: delete it to get another"
	return c
}

func pluralDevices(n int) string {
	if n == 1 {
		return "1 device"
	}
	return strconv.Itoa(n) + " devices"
}
