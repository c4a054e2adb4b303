package helm

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestStatusPort: /metrics, /state and /healthz are bound to the node's loopback by default
// (they have no authentication; the pod is in the host network namespace, so the node reaches
// 127.0.0.1), elsewhere only when asked; no port is declared.
func TestStatusPort(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantArg string
	}{
		{"default: loopback", nil, "--metrics-addr=127.0.0.1:9478"},
		{"another port", []string{"--set", "devicePlugin.metricsPort=39478"}, "--metrics-addr=127.0.0.1:39478"},
		{"every interface", []string{"--set", "devicePlugin.metricsHost="}, "--metrics-addr=:9478"},
		{"a node address", []string{"--set", "devicePlugin.metricsHost=10.0.0.5"}, "--metrics-addr=10.0.0.5:9478"},
		{"IPv6 loopback", []string{"--set", "devicePlugin.metricsHost=::1"}, "--metrics-addr=[::1]:9478"},
		{"off", []string{"--set", "devicePlugin.metricsPort=0"}, "--metrics-addr="},
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
			// No declared port: on the host network it would be a host port, and an update
			// with surge (two pods on a node) would never schedule the new pod.
			if len(c.Ports) != 0 {
				t.Errorf("ports %+v declared: the new pod of an update with surge would not schedule", c.Ports)
			}
		})
	}
}

// TestProbes: readiness and liveness are exec probes (device-plugin probe ready|live) on a
// socket the daemon serves (--probe-socket) in an emptyDir of its pod, whatever the status
// port: an httpGet probe on the host network's shared status port may be answered by the
// other pod of an update with surge (docs/device-plugin.md, "Updates"). Liveness gives the
// first scan time before it counts.
func TestProbes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"status port off", []string{"--set", "devicePlugin.metricsPort=0"}},
		{"dra", []string{"--set", "dra.enabled=true", "--set-json", draPools}},
		{"tuned", []string{"--set", "devicePlugin.probes.readiness.periodSeconds=15,devicePlugin.probes.liveness.periodSeconds=30,devicePlugin.probes.liveness.failureThreshold=3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := daemonSet(t, render(t, tc.args...)).Template.Spec
			c := spec.Containers[0]
			if c.Name != "device-plugin" {
				t.Fatalf("first container %s, want device-plugin", c.Name)
			}
			var socket []string
			for _, a := range c.Args {
				if v, ok := strings.CutPrefix(a, "--probe-socket="); ok {
					socket = append(socket, v)
				}
			}
			if len(socket) != 1 || socket[0] == "" {
				t.Fatalf("--probe-socket args %q, want one path", socket)
			}
			sock := socket[0]
			for name, tt := range map[string]struct {
				p     *probe
				check string
			}{"readiness": {c.ReadinessProbe, "ready"}, "liveness": {c.LivenessProbe, "live"}} {
				if tt.p == nil || tt.p.Exec == nil || tt.p.HTTPGet != nil || tt.p.TCPSocket != nil || tt.p.GRPC != nil {
					t.Errorf("%s probe %+v, want exec alone", name, tt.p)
					continue
				}
				want := []string{"/usr/local/bin/device-plugin", "probe", tt.check, "--socket=" + sock}
				if diff := cmp.Diff(want, tt.p.Exec.Command); diff != "" {
					t.Errorf("%s probe command (-want +got):\n%s", name, diff)
				}
				if tt.p.TimeoutSeconds < 2 {
					t.Errorf("%s probe times out after %ds: the probe binary starts on a busy node", name, tt.p.TimeoutSeconds)
				}
			}
			if l := c.LivenessProbe; l != nil && (l.InitialDelaySeconds < 30 || l.PeriodSeconds*l.FailureThreshold < 30) {
				t.Errorf("liveness probe %+v restarts a starting or briefly busy daemon", *l)
			}
			// The timing: the values' defaults, or what devicePlugin.probes set.
			type timing struct{ Delay, Period, Timeout, Failures int }
			of := func(p *probe) timing {
				if p == nil {
					return timing{}
				}
				return timing{p.InitialDelaySeconds, p.PeriodSeconds, p.TimeoutSeconds, p.FailureThreshold}
			}
			ready, live := timing{0, 5, 5, 0}, timing{60, 10, 5, 6}
			if tc.name == "tuned" {
				ready.Period, live.Period, live.Failures = 15, 30, 3
			}
			if diff := cmp.Diff([]timing{ready, live}, []timing{of(c.ReadinessProbe), of(c.LivenessProbe)}); diff != "" {
				t.Errorf("probe timing, readiness and liveness (-want +got):\n%s", diff)
			}
			// The socket's directory is an emptyDir of this pod, mounted in this container only.
			empty := map[string]bool{}
			for _, v := range spec.Volumes {
				if v.EmptyDir != nil {
					empty[v.Name] = true
				}
			}
			var mounts []string
			for _, ct := range slices.Concat(spec.InitContainers, spec.Containers) {
				for _, m := range ct.VolumeMounts {
					if m.MountPath == path.Dir(sock) || (empty[m.Name] && ct.Name != c.Name) {
						mounts = append(mounts, fmt.Sprintf("%s: %s at %s, emptyDir %t", ct.Name, m.Name, m.MountPath, empty[m.Name]))
					}
				}
			}
			want := []string{fmt.Sprintf("device-plugin: probe at %s, emptyDir true", path.Dir(sock))}
			if diff := cmp.Diff(want, mounts); diff != "" {
				t.Errorf("mounts of the probe socket's directory (-want +got):\n%s", diff)
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

// TestTerminationGrace: the daemon's grace between SIGTERM and SIGKILL is the kubelet's
// default unless devicePlugin.terminationGracePeriodSeconds sets it (a daemon killed leaves
// its sockets and CDI specs); the schema refuses what is not a positive integer.
func TestTerminationGrace(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int64
	}{{nil, 30}, {[]string{"--set", "devicePlugin.terminationGracePeriodSeconds=120"}, 120}} {
		g := daemonSet(t, render(t, tc.args...)).Template.Spec.TerminationGracePeriod
		if g == nil || *g != tc.want {
			t.Errorf("%v: terminationGracePeriodSeconds %v, want %d", tc.args, g, tc.want)
		}
	}
	for _, bad := range []string{"0", "-5", "\"30s\""} {
		if out, err := helmTemplate(t, "--set-json", "devicePlugin.terminationGracePeriodSeconds="+bad); err == nil {
			t.Errorf("terminationGracePeriodSeconds=%s rendered:\n%.300s", bad, out)
		}
	}
}
