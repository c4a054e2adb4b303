package kubectlrdma

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// netdevsMissingChecks: the daemon found the pod holding devices of a pool
// whose pods get netdevs through the CNI plugin (chained, gpuAligned) with
// no attachment of them (status.podsWithoutNetdevs, docs/device-plugin.md
// "Fail closed"): one fail per pool. None when the daemon found nothing.
func netdevsMissingChecks(pod *corev1.Pod, s *v1alpha1.RDMANodeState) []Check {
	var checks []Check
	for _, m := range s.Status.PodsWithoutNetdevs {
		if m.Namespace != pod.Namespace || m.Pod != pod.Name {
			continue
		}
		checks = append(checks, Check{Name: "netdevs of pool " + m.Pool, Verdict: Fail,
			Detail: fmt.Sprintf("the pod holds %s of pool %s (%s) but the kube-rdma CNI plugin attached nothing for it (found by the daemon, since %s): "+
				"the kube-rdma entry was missing from the CNI conflist when the pod sandbox was created (daemon restart window or uninstall)",
				strings.Join(m.Devices, ","), m.Pool, m.Why, m.Since.UTC().Format("2006-01-02T15:04:05Z")),
			Fix: fmt.Sprintf("delete the pod so that it is created again with the CNI entry in place: kubectl delete pod -n %s %s (its controller recreates it)", pod.Namespace, pod.Name)})
	}
	return checks
}
