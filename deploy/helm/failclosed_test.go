package helm

import (
	"slices"
	"testing"
)

// TestFailClosed: the daemon gets --nri-fail-closed from nri.failClosed
// (default true) with or without nri.enabled: it also turns the netdev
// hook of the chained pool's CDI devices on and off; with the CNI plugin installed it reads the
// plugin's records and PodResources even without node state, for the NRI
// refusal and the detector of pods without their netdevs.
func TestFailClosed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		set       string
		want, not []string
		paths     []string
	}{
		{name: "default", set: "nri.enabled=true", want: []string{"--nri-fail-closed=true"}},
		{name: "off", set: "nri.enabled=true,nri.failClosed=false", want: []string{"--nri-fail-closed=false"}},
		{name: "no nri", set: "nri.enabled=false", want: []string{"--nri-fail-closed=true"}, not: []string{"--nri"}},
		{name: "no nri, off", set: "nri.enabled=false,nri.failClosed=false", want: []string{"--nri-fail-closed=false"}, not: []string{"--nri"}},
		// Without the reclaimer, which writes the records (TestReclaim), the daemon only reads them.
		{name: "cni without node state", set: "nodeState.enabled=false,cni.install=true,cni.reclaim.enabled=false",
			want:  []string{"--cni-state-dir=/var/lib/cni/kube-rdma", "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"},
			paths: []string{"/var/lib/cni/kube-rdma", "/var/lib/kubelet/pod-resources"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := daemonSet(t, render(t, "--set", tc.set))
			args := ds.Template.Spec.Containers[0].Args
			for _, a := range tc.want {
				if !slices.Contains(args, a) {
					t.Errorf("args %q lack %s", args, a)
				}
			}
			for _, a := range tc.not {
				if slices.Contains(args, a) {
					t.Errorf("args %q have %s", args, a)
				}
			}
			paths := hostPaths(ds)
			for _, p := range tc.paths {
				if ro, ok := paths[p]; !ok || !ro {
					t.Errorf("host paths %v: want %s read-only", paths, p)
				}
			}
		})
	}
}
