package helm

import (
	"fmt"
	"strings"
	"testing"
)

// servedSince is the first Kubernetes minor that serves each apiVersion and
// kind the chart renders (the group's GA; monitoring.coreos.com and
// k8s.cni.cncf.io are CRDs of other projects, 0: any). A kind missing here
// fails TestRenderPerKubeVersion: a new template names its minimum.
var servedSince = map[string]int{
	"v1 ConfigMap": 0, "v1 Secret": 0, "v1 ServiceAccount": 0, "v1 Service": 0,
	"apps/v1 DaemonSet": 0,
	"batch/v1 Job":      0,
	"rbac.authorization.k8s.io/v1 ClusterRole":                         0,
	"rbac.authorization.k8s.io/v1 ClusterRoleBinding":                  0,
	"rbac.authorization.k8s.io/v1 Role":                                0,
	"rbac.authorization.k8s.io/v1 RoleBinding":                         0,
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy":        30,
	"admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding": 30,
	"resource.k8s.io/v1 DeviceClass":                                   34,
	"monitoring.coreos.com/v1 PodMonitor":                              0,
	"monitoring.coreos.com/v1 PrometheusRule":                          0,
	"k8s.cni.cncf.io/v1 NetworkAttachmentDefinition":                   0,
}

// TestRenderPerKubeVersion renders the chart for every minor from 1.28 to
// 1.37, with the default values and with everything on: below the chart's
// kubeVersion (1.34, the oldest supported minor) helm refuses it, naming the
// requirement; every other render holds only kinds that minor serves.
func TestRenderPerKubeVersion(t *testing.T) {
	all := []string{"--set", "dra.enabled=true", "--set", "nri.enabled=true", "--set", "monitoring.podMonitor.enabled=true", "--set", "devicePlugin.metricsHost=0.0.0.0",
		"--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.grafanaDashboard.enabled=true", "--set", "cni.install=true"}
	for minor := 28; minor <= 37; minor++ {
		for _, c := range []struct {
			name string
			args []string
			min  int
			msg  string
		}{
			{"defaults", nil, 34, "kubeVersion"},
			{"dra", all, 34, "kubeVersion"},
		} {
			args := append([]string{"--kube-version", fmt.Sprintf("1.%d.0", minor)}, c.args...)
			out, err := helmTemplate(t, args...)
			if minor < c.min {
				if err == nil || !strings.Contains(string(out), c.msg) {
					t.Errorf("1.%d, %s: err %v, %q; want a refusal naming %q", minor, c.name, err, out, c.msg)
				}
				continue
			}
			if err != nil {
				t.Errorf("1.%d, %s: %v\n%s", minor, c.name, err, out)
				continue
			}
			for _, o := range render(t, args...) {
				key := o.APIVersion + " " + o.Kind
				since, ok := servedSince[key]
				switch {
				case !ok:
					t.Errorf("1.%d, %s: renders %s, not in servedSince", minor, c.name, key)
				case minor < since:
					t.Errorf("1.%d, %s: renders %s, served from 1.%d", minor, c.name, key, since)
				}
			}
		}
	}
}
