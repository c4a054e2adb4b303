package helm

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const (
	alertRulesFile = chartDir + "/files/prometheus-rules.yaml"
	rulesTests     = chartDir + "/files/tests"
	dashboardFile  = chartDir + "/files/grafana-dashboard.json"
)

// pendingMetrics are series the rules and the dashboard use that other branches
// add to the daemon (the pod-without-NIC gauge, the quarantined-records counter). The test
// fails once one is defined in the code, so that its entry goes.
var pendingMetrics = map[string]bool{}

// TestMonitoringOff: without monitoring.* nothing of the Prometheus Operator or Grafana renders
// (TestDefaults checks the whole list of kinds).
func TestMonitoringOff(t *testing.T) {
	for _, k := range kinds(render(t)) {
		if k == "PodMonitor" || k == "PrometheusRule" {
			t.Errorf("%s rendered by default", k)
		}
	}
}

type podMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	Endpoints []struct {
		Path        string `json:"path"`
		Relabelings []struct {
			SourceLabels []string `json:"sourceLabels"`
			TargetLabel  string   `json:"targetLabel"`
			Replacement  string   `json:"replacement"`
		} `json:"relabelings"`
		Authorization *struct {
			Type        string `json:"type"`
			Credentials struct {
				Name string `json:"name"`
				Key  string `json:"key"`
			} `json:"credentials"`
		} `json:"authorization"`
	} `json:"podMetricsEndpoints"`
}

func podMonitor(t *testing.T, objs []object) podMonitorSpec {
	t.Helper()
	var pm podMonitorSpec
	if err := json.Unmarshal(find(t, objs, "PodMonitor").Spec, &pm); err != nil {
		t.Fatal(err)
	}
	if len(pm.Endpoints) != 1 {
		t.Fatalf("PodMonitor endpoints %+v, want one", pm.Endpoints)
	}
	return pm
}

// TestPodMonitor: off the loopback, the PodMonitor selects the daemon's pods, scrapes the
// node's IP at metricsPort and sends the token of a service account bound to
// <release>-metrics-reader (metricsAuth auto is on there); on the loopback it is refused.
func TestPodMonitor(t *testing.T) {
	objs := render(t, "--set", "monitoring.podMonitor.enabled=true,devicePlugin.metricsHost=0.0.0.0,devicePlugin.metricsPort=9555",
		"--set", "monitoring.podMonitor.labels.release=prom")
	pm := podMonitor(t, objs)
	ds := daemonSet(t, objs)
	for k, v := range pm.Selector.MatchLabels {
		if ds.Template.Metadata.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s, which the daemon's pods do not carry (%v)", k, v, ds.Template.Metadata.Labels)
		}
	}
	if find(t, objs, "PodMonitor").Metadata.Labels["release"] != "prom" {
		t.Error("monitoring.podMonitor.labels not on the PodMonitor")
	}
	ep := pm.Endpoints[0]
	if ep.Path != "/metrics" || len(ep.Relabelings) == 0 || ep.Relabelings[0].TargetLabel != "__address__" ||
		ep.Relabelings[0].Replacement != "${1}:9555" || !slices.Equal(ep.Relabelings[0].SourceLabels, []string{"__meta_kubernetes_pod_ip"}) {
		t.Errorf("PodMonitor endpoint %+v: want /metrics at the pod IP, port 9555", ep)
	}
	if ep.Authorization == nil || ep.Authorization.Type != "Bearer" || ep.Authorization.Credentials.Key != "token" {
		t.Fatalf("PodMonitor authorization %+v: want the scraper's bearer token", ep.Authorization)
	}
	secret := ep.Authorization.Credentials.Name
	var sa, binding bool
	for _, o := range objs {
		switch {
		case o.Kind == "Secret" && o.Metadata.Name == secret:
			sa = o.Metadata.Annotations["kubernetes.io/service-account.name"] == secret
		case o.Kind == "ClusterRoleBinding" && o.Metadata.Name == secret:
			binding = strings.Contains(string(o.RoleRef), `"rdma-kube-rdma-metrics-reader"`) && strings.Contains(string(o.Subjects), `"`+secret+`"`)
		}
	}
	if !sa || !binding {
		t.Errorf("token Secret %s of its service account: %v; bound to the metrics-reader ClusterRole: %v", secret, sa, binding)
	}

	// A Secret of the user's: no service account of the chart's.
	objs = render(t, "--set", "monitoring.podMonitor.enabled=true,devicePlugin.metricsHost=0.0.0.0",
		"--set", "monitoring.podMonitor.tokenSecret.name=mine,monitoring.podMonitor.tokenSecret.key=tok")
	if a := podMonitor(t, objs).Endpoints[0].Authorization; a == nil || a.Credentials.Name != "mine" || a.Credentials.Key != "tok" {
		t.Errorf("authorization %+v, want the Secret mine/tok", a)
	}
	if slices.Contains(kinds(objs), "Secret") {
		t.Error("a token Secret rendered although tokenSecret names one")
	}
	// metricsAuth off: no token sent.
	objs = render(t, "--set", "monitoring.podMonitor.enabled=true,devicePlugin.metricsHost=0.0.0.0,devicePlugin.metricsAuth=off")
	if a := podMonitor(t, objs).Endpoints[0].Authorization; a != nil {
		t.Errorf("authorization %+v with metricsAuth off", a)
	}

	out, err := helmTemplate(t, "--set", "monitoring.podMonitor.enabled=true")
	if err == nil || !strings.Contains(string(out), "metricsHost off the loopback") {
		t.Errorf("PodMonitor on the loopback: err %v, output %s; want a refusal naming metricsHost", err, out)
	}
}

// TestPrometheusRule: the PrometheusRule's spec is files/prometheus-rules.yaml, and the
// dashboard ConfigMap holds files/grafana-dashboard.json under the sidecar's label.
func TestPrometheusRuleAndDashboard(t *testing.T) {
	objs := render(t, "--set", "monitoring.prometheusRule.enabled=true,monitoring.grafanaDashboard.enabled=true")
	b, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := yaml.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(find(t, objs, "PrometheusRule").Spec, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("PrometheusRule spec (-%s +rendered):\n%s", alertRulesFile, diff)
	}
	dash, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, o := range objs {
		if o.Kind == "ConfigMap" && o.Metadata.Labels["grafana_dashboard"] == "1" {
			found = true
			if diff := cmp.Diff(strings.TrimSpace(string(dash)), o.Data["kube-rdma.json"]); diff != "" {
				t.Errorf("dashboard ConfigMap (-file +rendered):\n%s", diff)
			}
		}
	}
	if !found {
		t.Error("no ConfigMap labelled grafana_dashboard=1")
	}
}

var (
	metricRef = regexp.MustCompile(`\bkube_rdma_[a-z0-9_]+`)
	// A series named in the code: a literal, or a name under agent.MetricsNamespace.
	literalName = regexp.MustCompile(`"(kube_rdma_[a-z0-9_]+)"`)
	nsName      = regexp.MustCompile(`Namespace: (?:ns|agent\.MetricsNamespace), Name: "([a-z0-9_]+)"`)
	// A desc built as ns+"_name" (prometheus.NewDesc).
	nsConcat = regexp.MustCompile(`\bns\+"_([a-z0-9_]+)"`)
)

// codeMetrics returns the series the module's Go code defines, read from its source.
func codeMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "e2e" || d.Name() == "deploy") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literalName.FindAllSubmatch(b, -1) {
			names[string(m[1])] = true
		}
		for _, m := range nsName.FindAllSubmatch(b, -1) {
			names["kube_rdma_device_plugin_"+string(m[1])] = true
		}
		for _, m := range nsConcat.FindAllSubmatch(b, -1) {
			names["kube_rdma_device_plugin_"+string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !names["kube_rdma_device_plugin_devices"] || !names["kube_rdma_nri_connected"] || !names["kube_rdma_cni_operations_total"] {
		t.Fatalf("metric names read from the code %v miss ones known to exist: the patterns are stale", names)
	}
	return names
}

// seriesOf is the metric a reference names: a histogram's _bucket, _sum and _count are its.
func seriesOf(ref string, known map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(ref, suf); ok && known[base] {
			return base
		}
	}
	return ref
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardAndRulesNameRealSeries: the dashboard is valid JSON whose every panel queries
// something, and every kube_rdma_* series it or the alert rules name is one the daemon defines
// (or one of pendingMetrics). With promtool found, every dashboard query parses as PromQL.
func TestDashboardAndRulesNameRealSeries(t *testing.T) {
	known := codeMetrics(t)
	for name := range pendingMetrics {
		if known[name] {
			t.Errorf("%s is defined in the code now: remove it from pendingMetrics", name)
		}
		known[name] = true
	}
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard title %q uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			if len(metricRef.FindAllString(tg.Expr, -1)) == 0 {
				t.Errorf("panel %q: query %q names no kube_rdma series", p.Title, tg.Expr)
			}
		}
	}
	rules, err := os.ReadFile(alertRulesFile)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{}
	for _, e := range exprs {
		for _, ref := range metricRef.FindAllString(e, -1) {
			used[seriesOf(ref, known)] = append(used[seriesOf(ref, known)], dashboardFile)
		}
	}
	for _, ref := range metricRef.FindAllString(string(rules), -1) {
		used[seriesOf(ref, known)] = append(used[seriesOf(ref, known)], alertRulesFile)
	}
	var unknown []string
	for name, where := range used {
		if !known[name] {
			unknown = append(unknown, fmt.Sprintf("%s (%s)", name, where[0]))
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("series named but defined nowhere in the code: %v", unknown)
	}

	promtool := promtoolBinary(t)
	if promtool == "" {
		return
	}
	// promtool parses the queries as recording rules ($instance as Grafana would fill it).
	var rs strings.Builder
	rs.WriteString("groups:\n- name: dashboard\n  rules:\n")
	for i, e := range exprs {
		q, _ := json.Marshal(strings.ReplaceAll(e, "$instance", ".*"))
		fmt.Fprintf(&rs, "  - record: dashboard_query_%d\n    expr: %s\n", i, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(path, []byte(rs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries do not parse: %v\n%s", err, out)
	}
}

func promtoolBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		return ""
	}
	return p
}

// TestPromtoolRules runs promtool check rules and promtool test rules (the unit tests in
// files/tests/) on the alert rules, as make promtool-test does.
func TestPromtoolRules(t *testing.T) {
	promtool := promtoolBinary(t)
	if promtool == "" {
		t.Skip("no promtool: apt-get install prometheus (Debian), or set $PROMTOOL")
	}
	tests, err := filepath.Glob(filepath.Join(rulesTests, "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests in %s: %v", rulesTests, err)
	}
	if out, err := exec.Command(promtool, "check", "rules", alertRulesFile).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := exec.Command(promtool, append([]string{"test", "rules"}, tests...)...).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
