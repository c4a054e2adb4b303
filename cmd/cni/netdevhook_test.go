package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

// TestNetdevHookCommand: the binary run as the runtime runs the netdev hook
// (the arguments of the CDI entry the daemon writes, the OCI state on
// stdin): a container of a sandbox with its attachment exits 0 silently;
// one of a sandbox without exits 1 with the refusal on stderr once, as
// `kubectl describe pod` shows it; a bad command line exits 2.
func TestNetdevHookCommand(t *testing.T) {
	dir := t.TempDir()
	if err := (attachment.Store{Dir: dir}).Save(attachment.Attachment{Schema: 1, Key: attachment.Key{ContainerID: "sb-ok", IfName: "net1"},
		Netns: "/var/run/netns/x", Devices: []attachment.Device{{RDMA: "mlx5_3"}}, Complete: true}); err != nil {
		t.Fatal(err)
	}
	bundle := t.TempDir()
	state := func(sandbox string) string {
		ann := map[string]string{"io.kubernetes.cri.container-type": "container", "io.kubernetes.cri.sandbox-id": sandbox,
			"io.kubernetes.cri.sandbox-namespace": "team", "io.kubernetes.cri.sandbox-name": "trainer-0"}
		spec, _ := json.Marshal(map[string]any{"annotations": ann, "linux": map[string]any{"namespaces": []map[string]string{{"type": "network"}}}})
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), spec, 0o600); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"ociVersion": "1.2.0", "id": "c", "status": "creating", "pid": 1, "bundle": bundle, "annotations": ann})
		return string(b)
	}
	hook := memlockhook.CDINetdevHook("/hooks/kube-rdma-hook-0", memlockhook.NetdevCheck{StateDir: dir, Pool: "roce", How: "chained CNI", Devices: []string{"mlx5_3"}})
	args := hook.Args[1:]

	out, errOut, code := runBinary(t, args, nil, state("sb-ok"))
	if code != 0 || out != "" || errOut != "" {
		t.Errorf("attached: exit %d, stdout %q, stderr %q; want 0 and nothing", code, out, errOut)
	}
	out, errOut, code = runBinary(t, args, nil, state("sb-other"))
	want := attachment.NotAttachedMessage("team/trainer-0", []string{"mlx5_3"}, "roce", "chained CNI") + "\n"
	if code != 1 || out != "" || errOut != want {
		t.Errorf("not attached: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errOut, want)
	}
	// A gpuAligned pool's hook (--bound): sb-ok's record carries no binding.
	if err := (attachment.Store{Dir: dir}).Save(attachment.Attachment{Schema: 1, Key: attachment.Key{ContainerID: "sb-bound", IfName: "net1"},
		Netns: "/var/run/netns/x", Devices: []attachment.Device{{RDMA: "mlx5_1"}}, Complete: true, Binding: &attachment.Binding{Pool: "gpu-nics"}}); err != nil {
		t.Fatal(err)
	}
	bound := memlockhook.CDINetdevHook("/hooks/kube-rdma-hook-0", memlockhook.NetdevCheck{StateDir: dir, Pool: "gpu-nics", How: "gpuAligned",
		Devices: []string{"mlx5_0", "mlx5_1"}, Bound: true}).Args[1:]
	if _, errOut, code := runBinary(t, bound, nil, state("sb-bound")); code != 0 || errOut != "" {
		t.Errorf("gpuAligned, bound: exit %d, stderr %q; want 0", code, errOut)
	}
	want = attachment.NotAttachedMessage("team/trainer-0", []string{"mlx5_0", "mlx5_1"}, "gpu-nics", "gpuAligned") + "\n"
	if _, errOut, code := runBinary(t, bound, nil, state("sb-ok")); code != 1 || errOut != want {
		t.Errorf("gpuAligned, a record without the binding: exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{memlockhook.NetdevCommand, "--pool", "roce"}, "--pool and --devices are required"},
		{[]string{memlockhook.NetdevCommand, "--devices", "mlx5_3"}, "--pool and --devices are required"},
		{[]string{memlockhook.NetdevCommand, "--pool", "roce", "--devices", "mlx5_3", "extra"}, "takes no arguments"},
	} {
		_, errOut, code := runBinary(t, tc.args, nil, state("sb-ok"))
		if code != 2 || !strings.Contains(errOut, tc.says) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, errOut, tc.says)
		}
	}
}
