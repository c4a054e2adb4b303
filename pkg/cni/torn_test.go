package cni

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

const tornLog = "attachment record does not decode"

// TestTornRecordCostsItsOwnPod: a torn attachment record beside good ones
// does not fail the ADD of another pod (which lists every record for the
// claims): it is moved aside and logged once; an ADD of the torn record's
// own attachment goes on as if it had none.
func TestTornRecordCostsItsOwnPod(t *testing.T) {
	e := newEnv(t, 3, false, "shared")
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	pod1, pod2, pod3 := netnstest.New(t), netnstest.New(t), netnstest.New(t)
	mustAdd(t, e, args("c1", pod1, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`)))
	torn := []byte(`{"schema":1,"bootID":"test-boot","containerID":"c9","ifName":"net1","devices":[{"rdma":"mlx5_`)
	if err := os.WriteFile(filepath.Join(e.stateDir, "c9_net1.json"), torn, 0o600); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e, args("c2", pod2, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)))
	moved, _ := filepath.Glob(filepath.Join(e.stateDir, attachment.QuarantineDir, "c9_net1.json.*"))
	if len(moved) != 1 {
		t.Fatalf("quarantine holds %q, want the torn record", moved)
	}
	if data, err := os.ReadFile(moved[0]); err != nil || !bytes.Equal(data, torn) {
		t.Errorf("quarantined record = %q, %v; want its bytes", data, err)
	}
	// The device the good record claims is still refused to another pod.
	_, err := e.p.Add(context.Background(), args("c3", pod3, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`)))
	if cniCode(err) != CodeDeviceInUse {
		t.Errorf("ADD of a device a good record claims = %v (code %d), want %d", err, cniCode(err), CodeDeviceInUse)
	}
	// A torn record of the ADD's own attachment: as if there were none.
	if err := os.WriteFile(filepath.Join(e.stateDir, "c3_net1.json"), []byte("\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, e, args("c3", pod3, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_2"}`)))
	if n := strings.Count(logs.String(), tornLog); n != 2 {
		t.Errorf("logged %d torn records, want each once (2):\n%s", n, logs.String())
	}
	for _, c := range []struct {
		id  string
		pod *netnstest.NS
		dev string
	}{{"c1", pod1, "mlx5_0"}, {"c2", pod2, "mlx5_1"}, {"c3", pod3, "mlx5_2"}} {
		if err := e.p.Del(context.Background(), args(c.id, c.pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+c.dev+`"}`))); err != nil {
			t.Errorf("DEL %s: %v", c.id, err)
		}
	}
	if n := strings.Count(logs.String(), tornLog); n != 2 {
		t.Errorf("logged %d torn records after the DELs, want 2", n)
	}
}

// TestTornRecordDelReleasesIPAM: the DEL of a pod whose record is torn is
// a DEL without a record: the record is moved aside and the address is
// released with the runtime's configuration.
func TestTornRecordDelReleasesIPAM(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 0, false, "shared")
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	pod := netnstest.New(t)
	conf := e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.40.0.0/24"))
	ia := IPAMArgs{ContainerID: "c1", Netns: pod.Path, IfName: "net1", Path: cniPath}
	if _, err := (execIPAM{}).Add(context.Background(), "host-local", conf, ia); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(e.stateDir, "..", "ipam", "rdma", "10.40.0.2")
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.stateDir, "c1_net1.json"), []byte(`{"schema":1,"bootID":"test-boot","contai`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Del(context.Background(), args("c1", pod, "net1", conf)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("lease %s still there after DEL (%v)", lease, err)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "c1_net1.json")); !os.IsNotExist(err) {
		t.Errorf("torn record still in place after DEL: %v", err)
	}
	if n := strings.Count(logs.String(), tornLog); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestPoolsFileTorn: a torn pools file is moved aside and is then missing:
// refused (50, saying it was moved aside) when the node requires the
// kubelet's confirmation, attached with a warning when it does not; the
// daemon's next write is read again.
func TestPoolsFileTorn(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	pod := netnstest.New(t)
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	path := nodepools.Path(e.allocDir)
	if err := os.WriteFile(path, []byte(`{"version":1,"pools":[{"name":"rd`), 0o644); err != nil {
		t.Fatal(err)
	}
	req := args("c1", pod, "net1", e.conf("1.1.0", `"requirePodResources":true,"runtimeConfig":{"deviceID":"mlx5_0"}`))
	req.Args = "K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=trainer-0"
	_, err := e.p.Add(context.Background(), req)
	if cniCode(err) != types.ErrPluginNotAvailable || !strings.Contains(err.Error(), "moved aside") {
		t.Errorf("ADD with a torn pools file, required = %v (code %d), want 50 saying it was moved aside", err, cniCode(err))
	}
	if moved, _ := filepath.Glob(filepath.Join(e.allocDir, allocdir.QuarantineDir, nodepools.FileName+".*")); len(moved) != 1 {
		t.Errorf("quarantine holds %q, want the torn pools file", moved)
	}
	if n := strings.Count(logs.String(), "pools file does not decode"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
	a := args("c1", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, a)
	if !strings.Contains(logs.String(), "no pools file; deviceID not checked") || strings.Count(logs.String(), "pools file does not decode") != 1 {
		t.Errorf("want the missing-file warning and no second torn report:\n%s", logs.String())
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}

// TestStatusLogsTornClaimRecord: STATUS in DRA mode reads the claim
// records; a torn one it moves aside is logged, and STATUS passes.
func TestStatusLogsTornClaimRecord(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	claims := t.TempDir()
	e.claims = claims // the node's claims dir
	if err := os.WriteFile(claimrecord.Path(claims, "claim-torn"), []byte(`{"version":2,"uid":"cla`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.p.Status(context.Background(), args("", nil, "", e.conf("1.1.0", `"draClaimsDir":"`+claims+`"`))); err != nil {
		t.Errorf("STATUS beside a torn claim record: %v", err)
	}
	if n := strings.Count(logs.String(), "dra claim record does not decode"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}
