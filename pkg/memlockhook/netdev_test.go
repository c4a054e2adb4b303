package memlockhook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// ociState writes a bundle whose config.json has the annotations and, when
// netns, a network namespace of its own, and returns the hook's stdin
// (annotations in the state too unless inBundleOnly).
func ociState(t *testing.T, ann map[string]string, netns, inBundleOnly bool) string {
	t.Helper()
	bundle := t.TempDir()
	nss := []map[string]string{{"type": "pid"}, {"type": "mount"}}
	if netns {
		nss = append(nss, map[string]string{"type": "network", "path": "/var/run/netns/cni-1"})
	}
	spec, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "annotations": ann, "linux": map[string]any{"namespaces": nss}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	st := map[string]any{"ociVersion": "1.2.0", "id": "ctr", "status": "creating", "pid": 4242, "bundle": bundle}
	if !inBundleOnly {
		st["annotations"] = ann
	}
	b, _ := json.Marshal(st)
	return string(b)
}

func containerd(sandbox string) map[string]string {
	return map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": sandbox,
		"io.kubernetes.cri.sandbox-namespace": "team", "io.kubernetes.cri.sandbox-name": "trainer-0"}
}

// TestRunNetdev: the hook lets a container through when its pod sandbox's
// complete records cover every device of its CDI device, and refuses it,
// with the message every refuser says, when they do not (no record, an ADD
// that did not finish, a device given back, another sandbox's record, no
// state directory); the sandbox's own container, a hostNetwork one and one
// whose runtime names no sandbox pass unchecked. A device is covered by its
// name or by its function (PCI address, an SF's auxiliary device), so a
// rename since the ADD does not refuse it. CRI-O's annotations name
// the sandbox as containerd's do; annotations only in the bundle's spec
// are read there.
func TestRunNetdev(t *testing.T) {
	dir := t.TempDir()
	store := attachment.Store{Dir: dir}
	save := func(sandbox, ifName string, complete bool, devs ...attachment.Device) {
		t.Helper()
		if err := store.Save(attachment.Attachment{Schema: 1, Key: attachment.Key{ContainerID: sandbox, IfName: ifName},
			Netns: "/var/run/netns/x", Devices: devs, Complete: complete}); err != nil {
			t.Fatal(err)
		}
	}
	save("sb-ok", "net1", true, attachment.Device{RDMA: "mlx5_3"}, attachment.Device{RDMA: "mlx5_4"})
	save("sb-half", "net1", false, attachment.Device{RDMA: "mlx5_5"})
	save("sb-returned", "net1", true, attachment.Device{RDMA: "mlx5_6", Returned: true})
	save("sb-fn", "net1", true, attachment.Device{RDMA: "mlx5_8", PCIAddress: "0000:18:00.2"},
		attachment.Device{RDMA: "mlx5_9", PCIAddress: "0000:18:00.0", AuxDevice: "mlx5_core.sf.2"})

	check := func(devs ...string) NetdevCheck {
		return NetdevCheck{StateDir: dir, Pool: "roce", How: "chained CNI", Devices: devs}
	}
	crio := map[string]string{"io.kubernetes.cri-o.ContainerType": "container", "io.kubernetes.cri-o.SandboxID": "sb-ok",
		"io.kubernetes.pod.namespace": "team", "io.kubernetes.pod.name": "trainer-0"}
	for _, tc := range []struct {
		name     string
		stdin    string
		check    NetdevCheck
		refused  []string // the devices the message names; nil: let through
		reasonIs string
	}{
		{"attached", ociState(t, containerd("sb-ok"), true, false), check("mlx5_3"), nil, "attached"},
		{"shared set attached", ociState(t, containerd("sb-ok"), true, false), check("mlx5_3", "mlx5_4"), nil, "attached"},
		{"CRI-O attached", ociState(t, crio, true, false), check("mlx5_4"), nil, "attached"},
		{"annotations in the bundle only", ociState(t, containerd("sb-ok"), true, true), check("mlx5_3"), nil, "attached"},
		{"renamed since its ADD, found by PCI address", ociState(t, containerd("sb-fn"), true, false), check("mlx5_12@0000:18:00.2"), nil, "attached"},
		{"an SF renamed, found by its auxiliary device", ociState(t, containerd("sb-fn"), true, false), check("mlx5_13@mlx5_core.sf.2"), nil, "attached"},
		{"a record without functions, found by name", ociState(t, containerd("sb-ok"), true, false), check("mlx5_3@0000:40:00.0"), nil, "attached"},
		{"an SF's PF address is not the SF", ociState(t, containerd("sb-fn"), true, false), check("mlx5_14@0000:18:00.0"), []string{"mlx5_14"}, ""},
		{"no record of the sandbox", ociState(t, containerd("sb-none"), true, false), check("mlx5_3"), []string{"mlx5_3"}, ""},
		{"another device of the sandbox", ociState(t, containerd("sb-ok"), true, false), check("mlx5_3", "mlx5_7"), []string{"mlx5_7"}, ""},
		{"an ADD that did not finish", ociState(t, containerd("sb-half"), true, false), check("mlx5_5"), []string{"mlx5_5"}, ""},
		{"a device given back", ociState(t, containerd("sb-returned"), true, false), check("mlx5_6"), []string{"mlx5_6"}, ""},
		{"CRI-O, another sandbox", ociState(t, map[string]string{"io.kubernetes.cri-o.SandboxID": "sb-none",
			"io.kubernetes.pod.namespace": "team", "io.kubernetes.pod.name": "trainer-0"}, true, false), check("mlx5_3"), []string{"mlx5_3"}, ""},
		{"no state directory", ociState(t, containerd("sb-ok"), true, false), NetdevCheck{Pool: "roce", How: "chained CNI", Devices: []string{"mlx5_3"}}, []string{"mlx5_3"}, ""},
		{"the sandbox's own container", ociState(t, map[string]string{"io.kubernetes.cri.container-type": "sandbox", "io.kubernetes.cri.sandbox-id": "sb-none"}, true, false), check("mlx5_3"), nil, "the pod sandbox's own container"},
		{"hostNetwork", ociState(t, containerd("sb-none"), false, false), check("mlx5_3"), nil, "no network namespace of its own (hostNetwork)"},
		{"no sandbox named", ociState(t, map[string]string{"other": "x"}, true, false), check("mlx5_3"), nil, "the runtime names no pod sandbox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := RunNetdev(strings.NewReader(tc.stdin), tc.check)
			if tc.refused == nil {
				if err != nil || v.Refused || v.Reason != tc.reasonIs {
					t.Fatalf("got %+v, %v; want let through for %q", v, err, tc.reasonIs)
				}
				return
			}
			want := attachment.NotAttachedMessage("team/trainer-0", tc.refused, "roce", "chained CNI")
			if !v.Refused || err == nil || v.Message != want || err.Error() != want {
				t.Fatalf("got %+v, %v; want refused with %q", v, err, want)
			}
		})
	}

	// A gpuAligned pool (Bound): a complete record of the sandbox carrying
	// the pool's binding covers every member, whichever the plugin chose; a
	// record without it, or one of another pool, or an unfinished one does not.
	bind := func(sandbox, pool string, complete bool) {
		t.Helper()
		if err := store.Save(attachment.Attachment{Schema: 1, Key: attachment.Key{ContainerID: sandbox, IfName: "net1"},
			Netns: "/var/run/netns/x", Devices: []attachment.Device{{RDMA: "mlx5_2"}}, Complete: complete,
			Binding: &attachment.Binding{Pool: pool}}); err != nil {
			t.Fatal(err)
		}
	}
	bind("sb-bound", "gpu-nics", true)
	bind("sb-other-pool", "other", true)
	bind("sb-bound-half", "gpu-nics", false)
	bound := NetdevCheck{StateDir: dir, Pool: "gpu-nics", How: "gpuAligned", Devices: []string{"mlx5_0", "mlx5_1", "mlx5_2"}, Bound: true}
	for sandbox, refused := range map[string]bool{"sb-bound": false, "sb-ok": true, "sb-other-pool": true, "sb-bound-half": true, "sb-none": true} {
		v, err := RunNetdev(strings.NewReader(ociState(t, containerd(sandbox), true, false)), bound)
		want := attachment.NotAttachedMessage("team/trainer-0", bound.Devices, "gpu-nics", "gpuAligned")
		switch {
		case !refused && (err != nil || v.Refused || v.Reason != "attached"):
			t.Errorf("gpuAligned, sandbox %s: got %+v, %v; want let through", sandbox, v, err)
		case refused && (!v.Refused || err == nil || v.Message != want):
			t.Errorf("gpuAligned, sandbox %s: got %+v, %v; want refused with %q", sandbox, v, err, want)
		}
	}

	for _, bad := range []string{"", "{", `{"pid":1,"bundle":"` + filepath.Join(dir, "no-such-bundle") + `"}`} {
		if _, err := RunNetdev(strings.NewReader(bad), check("mlx5_3")); err == nil {
			t.Errorf("state %q: no error", bad)
		}
	}
}

// TestCDINetdevHook: the hook's entry names the command and every flag the
// command reads (cmd/cni's TestNetdevHookCommand runs the binary with it).
func TestCDINetdevHook(t *testing.T) {
	h := CDINetdevHook("/var/lib/kube-rdma/hooks/kube-rdma-hook-0123", NetdevCheck{StateDir: "/var/lib/cni/kube-rdma", Pool: "roce",
		How: "chained CNI", Devices: []string{"mlx5_0", "mlx5_1"}})
	want := []string{"kube-rdma-hook-0123", NetdevCommand, "--state-dir", "/var/lib/cni/kube-rdma", "--pool", "roce", "--how", "chained CNI", "--devices", "mlx5_0,mlx5_1"}
	if h.HookName != "createRuntime" || h.Path != "/var/lib/kube-rdma/hooks/kube-rdma-hook-0123" || strings.Join(h.Args, "|") != strings.Join(want, "|") {
		t.Errorf("hook %+v, want createRuntime %v", h, want)
	}
	h = CDINetdevHook("/hooks/kube-rdma-hook-0", NetdevCheck{StateDir: "/s", Pool: "gpu-nics", How: "gpuAligned", Devices: []string{"mlx5_0"}, Bound: true})
	want = []string{"kube-rdma-hook-0", NetdevCommand, "--state-dir", "/s", "--pool", "gpu-nics", "--how", "gpuAligned", "--devices", "mlx5_0", "--bound"}
	if strings.Join(h.Args, "|") != strings.Join(want, "|") {
		t.Errorf("bound hook args %v, want %v", h.Args, want)
	}
}
