package helm

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReclaim: with the CNI plugin installed the daemon reclaims the attachments whose DEL never
// came (cni.reclaim, on by default), and gets for it what it needs and no more: CAP_NET_ADMIN
// alone (it restores NICs in the host netns), the plugin's state directory read-write (it
// removes records), the CNI bin directory read-only (it runs the IPAM plugin), host-local's
// leases read-write, the pods' netns directory read-only with HostToContainer propagation (it
// tells a gone netns; it must hold no copy of a pod's netns mount), and the PodResources socket.
// With cni.reclaim.enabled=false, none of it but the CNI bin directory read-only, where the
// daemon looks for the uninstall marker (on which it removes its pools file); without
// cni.install, none of it at all.
func TestReclaim(t *testing.T) {
	type mount struct {
		ReadOnly    bool
		Propagation string
	}
	type want struct {
		Args   []string
		Caps   []string
		Mounts map[string]mount // by mount path in the daemon container
	}
	on := want{
		Args: []string{"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock", "--cni-bin-dir=/host/cni/bin",
			"--cni-reclaim-state-dir=/var/lib/cni/kube-rdma", "--cni-reclaim-interval=30s"},
		Caps: []string{"NET_ADMIN"},
		Mounts: map[string]mount{"/var/lib/cni/kube-rdma": {}, "/host/cni/bin": {ReadOnly: true}, "/var/lib/cni/networks": {},
			"/var/run/netns": {ReadOnly: true, Propagation: "HostToContainer"}, "/var/lib/kubelet/pod-resources": {ReadOnly: true}},
	}
	for _, tc := range []struct {
		name string
		args []string
		want want
	}{
		{name: "chained", args: []string{"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib"}, want: on},
		{name: "mode none, no node state", args: []string{"--set", "cni.install=true,nodeState.enabled=false"}, want: on},
		{name: "other paths", args: []string{"--set", "cni.install=true,cni.reclaim.interval=1m,cni.reclaim.ipamDataDir=/srv/ipam,cni.reclaim.netnsDir=/run/netns"},
			want: want{
				Args: []string{"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock", "--cni-bin-dir=/host/cni/bin",
					"--cni-reclaim-state-dir=/var/lib/cni/kube-rdma", "--cni-reclaim-interval=1m"},
				Caps: []string{"NET_ADMIN"},
				Mounts: map[string]mount{"/var/lib/cni/kube-rdma": {}, "/host/cni/bin": {ReadOnly: true}, "/srv/ipam": {},
					"/run/netns": {ReadOnly: true, Propagation: "HostToContainer"}, "/var/lib/kubelet/pod-resources": {ReadOnly: true}},
			}},
		{name: "reclaim off", args: []string{"--set", "cni.install=true,cni.mode=chained,cni.chained.pool=ib,cni.reclaim.enabled=false"},
			want: want{Args: []string{"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock", "--cni-bin-dir=/host/cni/bin"},
				Mounts: map[string]mount{"/var/lib/cni/kube-rdma": {ReadOnly: true}, "/host/cni/bin": {ReadOnly: true}, "/var/lib/kubelet/pod-resources": {ReadOnly: true}}}},
		{name: "no CNI plugin", want: want{Args: []string{"--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"},
			Mounts: map[string]mount{"/var/lib/kubelet/pod-resources": {ReadOnly: true}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := daemonSet(t, render(t, tc.args...))
			c := ds.Template.Spec.Containers[0]
			var got want
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--cni-reclaim") || strings.HasPrefix(a, "--cni-bin-dir") || strings.HasPrefix(a, "--pod-resources-socket") {
					got.Args = append(got.Args, a)
				}
			}
			got.Caps = c.SecurityContext.Capabilities.Add
			got.Mounts = map[string]mount{}
			for _, m := range c.VolumeMounts {
				if slices.Contains([]string{"cni-state", "cni-bin", "cni-ipam", "netns", "pod-resources"}, m.Name) {
					got.Mounts[m.MountPath] = mount{ReadOnly: m.ReadOnly, Propagation: m.MountPropagation}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("daemon container (-want +got):\n%s", diff)
			}
			if drop := c.SecurityContext.Capabilities.Drop; !slices.Equal(drop, []string{"ALL"}) {
				t.Errorf("capabilities drop %v, want ALL", drop)
			}
			for _, other := range append(ds.Template.Spec.InitContainers, ds.Template.Spec.Containers[1:]...) {
				checkUnprivileged(t, []container{other})
			}
		})
	}
}
