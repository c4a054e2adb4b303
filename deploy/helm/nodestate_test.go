package helm

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// TestNodeStateRBAC: publishing RDMANodeState (the default) gives the daemon container a token
// and exactly the rules of files/node-state-rules.yaml (which pkg/nodestate's tests prove
// sufficient and minimal against a real API server), with no wildcard, bound to it alone (release "rdma" in render).
func TestNodeStateRBAC(t *testing.T) {
	objs := render(t)
	data, err := os.ReadFile("kube-rdma/files/node-state-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want []rule
	if err := yaml.UnmarshalStrict(data, &want); err != nil {
		t.Fatal(err)
	}
	want = append(want, rulesFile(t, "netdev-check-rules.yaml")...)
	role := find(t, objs, "ClusterRole")
	if diff := cmp.Diff(want, role.Rules); diff != "" {
		t.Errorf("ClusterRole rules (-want +got):\n%s", diff)
	}
	for _, r := range role.Rules {
		for _, s := range slices.Concat(r.APIGroups, r.Resources, r.Verbs) {
			if strings.Contains(s, "*") {
				t.Errorf("wildcard %q in rule %+v", s, r)
			}
		}
	}
	binding := find(t, objs, "ClusterRoleBinding")
	if got := string(binding.Subjects); got != `[{"kind":"ServiceAccount","name":"rdma-kube-rdma","namespace":"kube-rdma"}]` {
		t.Errorf("binding subjects %s", got)
	}
	if got := string(binding.RoleRef); got != `{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"rdma-kube-rdma"}` {
		t.Errorf("binding roleRef %s", got)
	}
	// The daemon publishes RDMANodeState: its container, and only it, reads a token.
	if diff := cmp.Diff([]string{"device-plugin"}, tokenContainers(t, objs)); diff != "" {
		t.Errorf("containers with a service account token (-want +got):\n%s", diff)
	}
	// Chained: install-cni and cni-chain make no API call and get no token.
	chained := render(t, "--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib")
	if diff := cmp.Diff([]string{"device-plugin"}, tokenContainers(t, chained)); diff != "" {
		t.Errorf("chained: containers with a service account token (-want +got):\n%s", diff)
	}
	// The chained pool reaches the node state (doctor judges its devices only).
	if args := daemonSet(t, chained).Template.Spec.Containers[0].Args; !slices.Contains(args, "--cni-chained-pool=ib") || !slices.Contains(args, "--cni-shared-netdev=none") {
		t.Errorf("chained: device plugin args %q lack --cni-chained-pool=ib or --cni-shared-netdev=none", args)
	}
	// The entry's sharedNetdev reaches the daemon's fail-closed checks.
	macvlan := render(t, "--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib,cni.pluginConfig.sharedNetdev=macvlan")
	if args := daemonSet(t, macvlan).Template.Spec.Containers[0].Args; !slices.Contains(args, "--cni-shared-netdev=macvlan") {
		t.Errorf("chained, sharedNetdev macvlan: device plugin args %q lack --cni-shared-netdev=macvlan", args)
	}
	for _, a := range daemonSet(t, objs).Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--cni-chained-pool") || strings.HasPrefix(a, "--cni-shared-netdev") {
			t.Errorf("not chained: device plugin arg %s", a)
		}
	}
	spec := daemonSet(t, objs).Template.Spec
	args := spec.Containers[0].Args
	for _, a := range []string{"--node-state=true", "--node-state-interval=2s", "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"} {
		if !slices.Contains(args, a) {
			t.Errorf("device plugin args %q lack %s", args, a)
		}
	}
}

// TestNodeStateOff: nodeState.enabled=false takes away the token, the RBAC and the
// PodResources mount, and tells the daemon not to publish.
func TestNodeStateOff(t *testing.T) {
	objs := render(t, "--set", "nodeState.enabled=false")
	if diff := cmp.Diff([]string{"ConfigMap", "DaemonSet", "ServiceAccount"}, kinds(objs)); diff != "" {
		t.Errorf("rendered kinds (-want +got):\n%s", diff)
	}
	if sa := find(t, objs, "ServiceAccount"); sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Error("the ServiceAccount automounts a token")
	}
	if got := tokenContainers(t, objs); len(got) != 0 {
		t.Errorf("containers %v read a service account token; the pods never call the API", got)
	}
	ds := daemonSet(t, objs)
	spec := ds.Template.Spec
	if _, ok := hostPaths(ds)["/var/lib/kubelet/pod-resources"]; ok {
		t.Error("the pod mounts pod-resources without nodeState")
	}
	if args := spec.Containers[0].Args; !slices.Contains(args, "--node-state=false") {
		t.Errorf("device plugin args %q lack --node-state=false", args)
	}
}
