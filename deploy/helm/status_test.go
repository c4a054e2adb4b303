package helm

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStatusPort: /metrics, /state and /healthz are bound to the node's loopback by default
// (they have no authentication; the pod is in the host network namespace, so the kubelet's
// probes and the node reach 127.0.0.1), elsewhere only when asked; the daemon is probed for
// readiness and liveness on /healthz at that address; no port, no probes.
func TestStatusPort(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		wantArg  string
		wantHost string // "": no probes
		wantPort int
		probed   bool
	}{
		{"default: loopback", nil, "--metrics-addr=127.0.0.1:9478", "127.0.0.1", 9478, true},
		{"another port", []string{"--set", "devicePlugin.metricsPort=39478"}, "--metrics-addr=127.0.0.1:39478", "127.0.0.1", 39478, true},
		{"every interface", []string{"--set", "devicePlugin.metricsHost="}, "--metrics-addr=:9478", "", 9478, true},
		{"a node address", []string{"--set", "devicePlugin.metricsHost=10.0.0.5"}, "--metrics-addr=10.0.0.5:9478", "10.0.0.5", 9478, true},
		{"IPv6 loopback", []string{"--set", "devicePlugin.metricsHost=::1"}, "--metrics-addr=[::1]:9478", "::1", 9478, true},
		{"off", []string{"--set", "devicePlugin.metricsPort=0"}, "--metrics-addr=", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := daemonSet(t, render(t, tc.args...)).Template.Spec.Containers[0]
			var addrs []string
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--metrics-addr") {
					addrs = append(addrs, a)
				}
			}
			if diff := cmp.Diff([]string{tc.wantArg}, addrs); diff != "" {
				t.Errorf("status address (-want +got):\n%s", diff)
			}
			// No declared port, probed or not: on the host network it would be a host port,
			// and an update with surge (two pods on a node) would never schedule the new pod.
			if len(c.Ports) != 0 {
				t.Errorf("ports %+v declared: the new pod of an update with surge would not schedule", c.Ports)
			}
			if !tc.probed {
				if c.ReadinessProbe != nil || c.LivenessProbe != nil {
					t.Errorf("no status port, yet ports %+v readiness %+v liveness %+v", c.Ports, c.ReadinessProbe, c.LivenessProbe)
				}
				return
			}
			for name, p := range map[string]*probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("no %s probe", name)
					continue
				}
				if p.HTTPGet.Host != tc.wantHost || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port != float64(tc.wantPort) {
					t.Errorf("%s probe %+v, want GET %s /healthz on port %d", name, *p.HTTPGet, tc.wantHost, tc.wantPort)
				}
			}
			// Liveness gives the first scan time before it counts, then restarts a daemon whose
			// status server stopped answering for a minute.
			if l := c.LivenessProbe; l != nil && (l.InitialDelaySeconds < 30 || l.PeriodSeconds*l.FailureThreshold < 30) {
				t.Errorf("liveness probe %+v restarts a starting or briefly busy daemon", *l)
			}
		})
	}
}

// TestEphemeralStorageRequests: every container asks for the local storage its logs take
// (the root file systems are read-only), in each shape of the pod.
func TestEphemeralStorageRequests(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib"},
		{"--set", "cni.install=true,cni.mode=multus", "--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib"}]`},
	} {
		spec := daemonSet(t, render(t, args...)).Template.Spec
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if c.Resources.Requests["ephemeral-storage"] == "" {
				t.Errorf("%v: container %s requests no ephemeral-storage (requests %v)", args, c.Name, c.Resources.Requests)
			}
			if _, ok := c.Resources.Limits["ephemeral-storage"]; ok {
				t.Errorf("%v: container %s limits ephemeral-storage: a log burst would evict the node's RDMA daemon", args, c.Name)
			}
		}
	}
}
