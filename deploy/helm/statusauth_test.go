package helm

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// fileRules reads a ClusterRole's rules from the chart's files/ (the ones pkg/nodestate and
// pkg/statusauth bind on a real API server).
func fileRules(t *testing.T, name string) []rule {
	t.Helper()
	data, err := os.ReadFile("kube-rdma/files/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var rules []rule
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return rules
}

// named returns the object of kind and name, or nil.
func named(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

// TestMetricsAuth: /metrics and /state need a token exactly when devicePlugin.metricsAuth says
// so (auto: the status address is not the loopback); the daemon is told the resolved on or
// off, and only then gets a token, create on tokenreviews and subjectaccessreviews
// (files/status-auth-rules.yaml) on top of its other rules, and the chart a metrics-reader
// ClusterRole (files/metrics-reader-rules.yaml) to bind scrapers to.
func TestMetricsAuth(t *testing.T) {
	nodeState := fileRules(t, "node-state-rules.yaml")
	authRules := fileRules(t, "status-auth-rules.yaml")
	for _, tc := range []struct {
		name string
		args []string
		on   bool
		// daemon's ClusterRole rules; nil: no ClusterRole named after the release
		wantRules []rule
	}{
		{"default: loopback", nil, false, nodeState},
		{"every interface", []string{"--set", "devicePlugin.metricsHost="}, true, slices.Concat(nodeState, authRules)},
		{"a node address", []string{"--set", "devicePlugin.metricsHost=10.0.0.5"}, true, slices.Concat(nodeState, authRules)},
		{"another loopback address", []string{"--set", "devicePlugin.metricsHost=127.0.0.2"}, false, nodeState},
		{"IPv6 loopback", []string{"--set", "devicePlugin.metricsHost=::1"}, false, nodeState},
		{"localhost", []string{"--set", "devicePlugin.metricsHost=localhost"}, false, nodeState},
		{"a name that starts like 127", []string{"--set", "devicePlugin.metricsHost=127.example.com"}, true, slices.Concat(nodeState, authRules)},
		{"on, loopback", []string{"--set", "devicePlugin.metricsAuth=on"}, true, slices.Concat(nodeState, authRules)},
		{"off, every interface", []string{"--set", "devicePlugin.metricsHost=,devicePlugin.metricsAuth=off"}, false, nodeState},
		{"on, no status port", []string{"--set", "devicePlugin.metricsAuth=on,devicePlugin.metricsPort=0"}, false, nodeState},
		{"no node state, every interface", []string{"--set", "nodeState.enabled=false,devicePlugin.metricsHost="}, true, authRules},
		{"no node state, loopback", []string{"--set", "nodeState.enabled=false"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			args := daemonSet(t, objs).Template.Spec.Containers[0].Args
			wantArg := map[bool]string{true: "--metrics-auth=on", false: "--metrics-auth=off"}[tc.on]
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, "--metrics-auth") {
					got = append(got, a)
				}
			}
			if diff := cmp.Diff([]string{wantArg}, got); diff != "" {
				t.Errorf("--metrics-auth args (-want +got):\n%s", diff)
			}
			role := named(objs, "ClusterRole", "rdma-kube-rdma")
			switch {
			case tc.wantRules == nil && role != nil:
				t.Errorf("ClusterRole rendered with rules %+v", role.Rules)
			case tc.wantRules != nil && role == nil:
				t.Errorf("no ClusterRole")
			case role != nil:
				want := append(slices.Clone(tc.wantRules), rulesFile(t, "netdev-check-rules.yaml")...)
				if diff := cmp.Diff(want, role.Rules); diff != "" {
					t.Errorf("daemon's ClusterRole rules (-want +got):\n%s", diff)
				}
			}
			reader := named(objs, "ClusterRole", "rdma-kube-rdma-metrics-reader")
			if (reader != nil) != tc.on {
				t.Fatalf("metrics-reader ClusterRole rendered: %v, want %v", reader != nil, tc.on)
			}
			if reader != nil {
				want := []rule{{NonResourceURLs: []string{"/metrics", "/state"}, Verbs: []string{"get"}}}
				if diff := cmp.Diff(want, reader.Rules); diff != "" {
					t.Errorf("metrics-reader rules (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(fileRules(t, "metrics-reader-rules.yaml"), reader.Rules); diff != "" {
					t.Errorf("metrics-reader rules are not files/metrics-reader-rules.yaml (-want +got):\n%s", diff)
				}
			}
			// The daemon reviews tokens with its own: its container, and only it, holds one.
			if tc.on {
				if diff := cmp.Diff([]string{"device-plugin"}, tokenContainers(t, objs)); diff != "" {
					t.Errorf("containers with a service account token (-want +got):\n%s", diff)
				}
			}
			// The probes carry no token: they are exec probes on the pod's own socket, never
			// the guarded paths (TestProbes).
			c := daemonSet(t, objs).Template.Spec.Containers[0]
			for _, p := range []*probe{c.ReadinessProbe, c.LivenessProbe} {
				if p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/healthz" {
					t.Errorf("a probe on %s", p.HTTPGet.Path)
				}
			}
		})
	}
}

// TestMetricsReaders: devicePlugin.metricsReaders are bound to the metrics-reader ClusterRole;
// metricsAuthAudiences reach the daemon.
func TestMetricsReaders(t *testing.T) {
	objs := render(t, "--set", "devicePlugin.metricsHost=",
		"--set-json", `devicePlugin.metricsReaders=[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"}]`,
		"--set-json", `devicePlugin.metricsAuthAudiences=["kube-rdma-status","other"]`)
	b := named(objs, "ClusterRoleBinding", "rdma-kube-rdma-metrics-reader")
	if b == nil {
		t.Fatal("no metrics-reader ClusterRoleBinding")
	}
	if got := string(b.Subjects); got != `[{"kind":"ServiceAccount","name":"prometheus-k8s","namespace":"monitoring"}]` {
		t.Errorf("subjects %s", got)
	}
	if got := string(b.RoleRef); got != `{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rdma-kube-rdma-metrics-reader"}` {
		t.Errorf("roleRef %s", got)
	}
	if args := daemonSet(t, objs).Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-auth-audiences=kube-rdma-status,other") {
		t.Errorf("args %q lack the audiences", args)
	}
	// No readers listed, or auth off: no binding.
	for _, args := range [][]string{{"--set", "devicePlugin.metricsHost="},
		{"--set-json", `devicePlugin.metricsReaders=[{"kind":"User","name":"u"}]`}} {
		if b := named(render(t, args...), "ClusterRoleBinding", "rdma-kube-rdma-metrics-reader"); b != nil {
			t.Errorf("%v: binding rendered: %s", args, b.Subjects)
		}
	}
	// The schema refuses what the daemon would.
	for _, bad := range []string{"devicePlugin.metricsAuth=yes", "devicePlugin.metricsAuth=true"} {
		if out, err := helmTemplate(t, "--set", bad); err == nil {
			t.Errorf("%s rendered:\n%.200s", bad, out)
		}
	}
}
