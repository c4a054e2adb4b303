package cnireclaim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/cnireclaim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// script writes an executable shell script standing in for the installed
// plugin (the real one: cmd/device-plugin's TestReclaimWired, cmd/cni's
// TestReclaimCommand).
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kube-rdma")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestExecRestorer: the installed plugin's results are read per key (its
// order need not be the keys'); a key it printed nothing for, and every key
// of a plugin that cannot reclaim (an older release: usage error, exit 2),
// fail with the reason, so their records stay.
func TestExecRestorer(t *testing.T) {
	args := filepath.Join(t.TempDir(), "args")
	bin := script(t, `echo "$@" > `+args+`
echo '{"containerID":"c2","ifName":"net1","skipped":"the record is gone"}'
echo '{"containerID":"c1","ifName":"eth0","pod":{"namespace":"ns","name":"p1"},"error":"netdev nic0 not back"}'
echo 'not json'
`)
	keys := []attachment.Key{{ContainerID: "c1", IfName: "eth0"}, {ContainerID: "c2", IfName: "net1"}, {ContainerID: "c3", IfName: "eth0"}}
	opts := cni.ReclaimOpts{Store: attachment.Store{Dir: "/state", BootID: "boot-1"}, CNIPath: "/cni/bin", SysfsRoot: "/sys2"}
	res := cnireclaim.ExecRestorer{Binary: bin}.Reclaim(context.Background(), opts, keys)
	if len(res) != 3 {
		t.Fatalf("results %+v, want 3", res)
	}
	if r := res[0]; r.Key != keys[0] || r.Err == nil || r.Err.Error() != "netdev nic0 not back" || r.Pod == nil || r.Pod.Name != "p1" {
		t.Errorf("c1: %+v, want its error and pod", r)
	}
	if r := res[1]; r.Key != keys[1] || r.Skipped != "the record is gone" || r.Err != nil {
		t.Errorf("c2: %+v, want skipped", r)
	}
	if r := res[2]; r.Key != keys[2] || r.Err == nil || !strings.Contains(r.Err.Error(), "printed no result") {
		t.Errorf("c3: %+v, want an error: no result", r)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	want := "reclaim --state-dir /state --boot-id boot-1 --cni-path /cni/bin --return-wait 0s --sysfs-root /sys2 c1/eth0 c2/net1 c3/eth0\n"
	if string(b) != want {
		t.Errorf("args %q, want %q", b, want)
	}

	old := script(t, `echo 'kube-rdma: unknown command "reclaim"' >&2; exit 2`)
	for _, r := range (cnireclaim.ExecRestorer{Binary: old}).Reclaim(context.Background(), opts, keys) {
		if r.Err == nil || !strings.Contains(r.Err.Error(), "exit status 2") || !strings.Contains(r.Err.Error(), `unknown command "reclaim"`) {
			t.Errorf("%v with an older plugin: %v, want its exit and message", r.Key, r.Err)
		}
	}
	missing := cnireclaim.ExecRestorer{Binary: filepath.Join(t.TempDir(), "kube-rdma")}
	for _, r := range missing.Reclaim(context.Background(), opts, keys[:1]) {
		if r.Err == nil {
			t.Errorf("%v without the plugin: no error", r.Key)
		}
	}
}
