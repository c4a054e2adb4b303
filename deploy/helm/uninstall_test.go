package helm

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hooks returns the rendered objects with a helm.sh/hook annotation, by kind.
func hooks(objs []object) map[string]object {
	h := map[string]object{}
	for _, o := range objs {
		if o.Metadata.Annotations["helm.sh/hook"] != "" {
			h[o.Kind] = o
		}
	}
	return h
}

// TestUninstallHook: with the CNI installed, helm uninstall first runs
// `kube-rdma uninstall` on every node the agent runs on (a DaemonSet with the
// agent's node selection, its init container doing the work so that ready
// means done, its hold container removing the marker when the hook goes),
// then a Job waits for that DaemonSet with the one permission it needs;
// only then does helm delete the agent. The hook's pods match no selector of
// the agent's, and only the Job's pod has a token. The hook removes the
// agent's pools file too: it mounts the allocDir at the agent's path. The
// hook's DaemonSet tolerates every taint (a node tainted after the agent's
// pod started there keeps that pod and its files), and the Job waits until
// it covers the agent's nodes; the Job's own tolerations are the chart's and
// then cni.uninstallHook.jobTolerations.
func TestUninstallHook(t *testing.T) {
	objs := render(t, "--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib",
		"--set-json", `nodeSelector={"gpu":"yes"}`,
		"--set-json", `tolerations=[{"key":"gpu","operator":"Exists","effect":"NoSchedule"}]`,
		"--set-json", `cni.uninstallHook.jobTolerations=[{"key":"infra","operator":"Exists"}]`)
	h := hooks(objs)
	if diff := cmp.Diff([]string{"DaemonSet", "Job", "Role", "RoleBinding", "ServiceAccount"}, slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})); diff != "" {
		t.Fatalf("hook kinds (-want +got):\n%s", diff)
	}
	weight := func(kind string) int {
		o := h[kind]
		if o.Metadata.Annotations["helm.sh/hook"] != "pre-delete" ||
			o.Metadata.Annotations["helm.sh/hook-delete-policy"] != "before-hook-creation,hook-succeeded" {
			t.Errorf("%s hook annotations %v", kind, o.Metadata.Annotations)
		}
		w, err := strconv.Atoi(o.Metadata.Annotations["helm.sh/hook-weight"])
		if err != nil {
			t.Fatalf("%s hook weight: %v", kind, err)
		}
		return w
	}
	if !(weight("ServiceAccount") < weight("DaemonSet") && weight("Role") < weight("DaemonSet") &&
		weight("RoleBinding") < weight("DaemonSet") && weight("DaemonSet") < weight("Job")) {
		t.Error("hook weights: the permissions, then the DaemonSet, then the Job that waits for it")
	}

	var ds daemonSetSpec
	if err := json.Unmarshal(h["DaemonSet"].Spec, &ds); err != nil {
		t.Fatal(err)
	}
	agent := daemonSet(t, objs)
	spec := ds.Template.Spec
	if diff := cmp.Diff(agent.Template.Spec.NodeSelector, spec.NodeSelector); diff != "" {
		t.Errorf("hook DaemonSet node selector differs from the agent's (-agent +hook):\n%s", diff)
	}
	if diff := cmp.Diff([]map[string]any{{"operator": "Exists"}}, spec.Tolerations); diff != "" {
		t.Errorf("hook DaemonSet tolerations (-want +got):\n%s", diff)
	}
	if matches(agentSelector(t, objs), ds.Template.Metadata.Labels) {
		t.Errorf("the agent's selector matches the hook's pods (labels %v)", ds.Template.Metadata.Labels)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the hook DaemonSet's pods get a token; they make no API call")
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("hook DaemonSet: %d init containers, %d containers; want 1 and 1", len(spec.InitContainers), len(spec.Containers))
	}
	work, hold := spec.InitContainers[0], spec.Containers[0]
	checkUnprivileged(t, []container{work, hold})
	// The daemon's pools file goes too (node as before): the path the agent writes.
	poolsFile := "/var/run/kube-rdma/alloc/_pools.json"
	if !slices.Contains(agent.Template.Spec.Containers[0].Args, "--pools-file="+poolsFile) {
		t.Fatalf("agent args %q: want --pools-file=%s", agent.Template.Spec.Containers[0].Args, poolsFile)
	}
	wantArgs := []string{"--bin-dir=/host/cni/bin", "--state-dir=/var/lib/cni/kube-rdma", "--conf-dir=/host/cni/net.d", "--pools-file=" + poolsFile}
	if !slices.Equal(work.Command, []string{"/usr/local/bin/kube-rdma", "uninstall"}) || !slices.Equal(work.Args, wantArgs) {
		t.Errorf("uninstall init container: %q %q, want kube-rdma uninstall %q", work.Command, work.Args, wantArgs)
	}
	if !slices.Equal(hold.Args, append([]string{"--hold", "--linger=5s"}, wantArgs...)) {
		t.Errorf("hold container args %q", hold.Args)
	}
	// The hold keeps the marker 5 s after its SIGTERM (the agent, stopped in the same
	// teardown, goes first): killed before it ends, it would keep the marker for good.
	if g := spec.TerminationGracePeriod; g == nil || *g < 10 {
		t.Errorf("hook pods' terminationGracePeriodSeconds %v, want at least 10 (the hold's 5 s linger and its exit)", g)
	}
	want := map[string]bool{"/opt/cni/bin": false, "/etc/cni/net.d": false, "/var/lib/cni/kube-rdma": true, "/var/run/kube-rdma/alloc": false}
	allocMounted := false
	for _, m := range work.VolumeMounts {
		allocMounted = allocMounted || m.Name == "alloc" && m.MountPath == "/var/run/kube-rdma/alloc" && !m.ReadOnly
	}
	if !allocMounted {
		t.Errorf("uninstall init container mounts %+v: want the allocDir read-write at its host path", work.VolumeMounts)
	}
	if diff := cmp.Diff(want, hostPaths(ds)); diff != "" {
		t.Errorf("hook host paths, true = read-only (-want +got):\n%s", diff)
	}

	var job struct {
		Template struct {
			Spec struct {
				ServiceAccountName           string           `json:"serviceAccountName"`
				AutomountServiceAccountToken *bool            `json:"automountServiceAccountToken"`
				HostNetwork                  bool             `json:"hostNetwork"`
				Tolerations                  []map[string]any `json:"tolerations"`
				Containers                   []container      `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	}
	if err := json.Unmarshal(h["Job"].Spec, &job); err != nil {
		t.Fatal(err)
	}
	js := job.Template.Spec
	if js.ServiceAccountName != h["ServiceAccount"].Metadata.Name || js.AutomountServiceAccountToken == nil || !*js.AutomountServiceAccountToken {
		t.Errorf("Job service account %q automount %v: want the hook's, with its token", js.ServiceAccountName, js.AutomountServiceAccountToken)
	}
	wantJobTol := []map[string]any{{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, {"key": "infra", "operator": "Exists"}}
	if diff := cmp.Diff(wantJobTol, js.Tolerations); diff != "" {
		t.Errorf("Job tolerations, the chart's then jobTolerations (-want +got):\n%s", diff)
	}
	if !js.HostNetwork {
		t.Error("the Job's pod needs a pod network; the conflist it would use is the one being edited")
	}
	c := js.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/device-plugin", "wait-daemonset"}) ||
		!slices.Contains(c.Args, "--name="+h["DaemonSet"].Metadata.Name) || !slices.Contains(c.Args, "--timeout=2m") ||
		!slices.Contains(c.Args, "--cover="+find(t, objs, "DaemonSet").Metadata.Name) {
		t.Errorf("Job container %q %q: want wait-daemonset of %s covering the agent's DaemonSet", c.Command, c.Args, h["DaemonSet"].Metadata.Name)
	}
	if c.SecurityContext.RunAsUser == nil || *c.SecurityContext.RunAsUser == 0 {
		t.Error("the waiting Job runs as root; it only reads the API")
	}
	rules := h["Role"].Rules
	if diff := cmp.Diff([]rule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get"},
		ResourceNames: []string{h["DaemonSet"].Metadata.Name, find(t, objs, "DaemonSet").Metadata.Name}}}, rules); diff != "" {
		t.Errorf("hook Role rules (-want +got):\n%s", diff)
	}

	// Multus mode: no conflist to edit.
	multus := hooks(render(t, "--set", "cni.install=true,cni.mode=multus",
		"--set-json", `cni.networks=[{"name":"rdma-ib","pool":"ib"}]`))
	if err := json.Unmarshal(multus["DaemonSet"].Spec, &ds); err != nil {
		t.Fatal(err)
	}
	for _, a := range ds.Template.Spec.InitContainers[0].Args {
		if strings.HasPrefix(a, "--conf-dir") {
			t.Errorf("multus: uninstall args %q name the conf dir", ds.Template.Spec.InitContainers[0].Args)
		}
	}
	for _, args := range [][]string{{"--set", "cni.install=false"}, {"--set", "cni.install=true,cni.uninstallHook.enabled=false"}} {
		if got := hooks(render(t, args...)); len(got) != 0 {
			t.Errorf("%q: %d hook objects rendered, want none", args, len(got))
		}
	}
}

// agentSelector is the agent DaemonSet's matchLabels.
func agentSelector(t *testing.T, objs []object) map[string]string {
	t.Helper()
	var s struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
	}
	if err := json.Unmarshal(find(t, objs, "DaemonSet").Spec, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Selector.MatchLabels) == 0 {
		t.Fatal("the agent DaemonSet has no matchLabels")
	}
	return s.Selector.MatchLabels
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
