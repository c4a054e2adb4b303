package cni

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// checkpointOf is a kubelet device checkpoint (the layout of kubelet
// 1.20-1.37) in which pod uid-1 holds devices of rdma/hca and registered
// lists the resources with healthy devices.
func checkpointOf(registered ...string) string {
	reg := ""
	for i, r := range registered {
		if i > 0 {
			reg += ","
		}
		reg += fmt.Sprintf("%q:[\"x\"]", r)
	}
	return `{"Data":{"PodDeviceEntries":[{"PodUID":"uid-1","ContainerName":"main","ResourceName":"rdma/hca","DeviceIDs":{"-1":["mlx5_0"]},"AllocResp":""},` +
		`{"PodUID":"uid-gpu","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["GPU-1"]},"AllocResp":""}],` +
		`"RegisteredDevices":{` + reg + `}},"Checksum":1}`
}

// TestHoldsNone: in resourceName mode a pod that the kubelet's device
// checkpoint shows without a device of the pool is passed through without
// a kubelet call; in every other case ADD asks the kubelet, whose answer
// decides.
func TestHoldsNone(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 2, false, "shared")
	srv := podrestest.Start(t,
		podrestest.Pod{Namespace: "ns", Name: "p", Devices: map[string][]string{"rdma/hca": {"mlx5_0"}}},
		podrestest.Pod{Namespace: "ns", Name: "gpu", Devices: map[string][]string{"nvidia.com/gpu": {"GPU-1"}}})
	e.socket = srv.Socket
	cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	e.p.KubeletCheckpoint = cp
	prev := `"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}],"ips":[{"address":"10.0.0.5/24","interface":0}]}`
	for _, tc := range []struct {
		name, checkpoint, pod, uid string
		wantCalls                  int32
		wantIfs                    []string
	}{
		{"pod without devices: no call", checkpointOf("rdma/hca", "nvidia.com/gpu"), "gpu", "uid-gpu", 0, []string{"eth0"}},
		{"pod unknown to the checkpoint: no call", checkpointOf("rdma/hca"), "gpu", "uid-new", 0, []string{"eth0"}},
		{"pod with devices: asked", checkpointOf("rdma/hca"), "p", "uid-1", 1, []string{"eth0", "net1"}},
		{"resource not registered there: asked", checkpointOf("nvidia.com/gpu"), "gpu", "uid-gpu", 1, []string{"eth0"}},
		{"no UID in CNI_ARGS: asked", checkpointOf("rdma/hca"), "gpu", "", 1, []string{"eth0"}},
		{"checkpoint in another format: asked", `{"Data":{"Entries":[]},"Checksum":1}`, "gpu", "uid-gpu", 1, []string{"eth0"}},
		{"no checkpoint: asked", "", "gpu", "uid-gpu", 1, []string{"eth0"}},
		// A checkpoint that says nothing of the pod while the kubelet gave
		// it a device cannot happen (the kubelet writes it before the
		// sandbox): this shows that the checkpoint, not the kubelet,
		// decided the pass-through.
		{"checkpoint trusted over the kubelet", checkpointOf("rdma/hca"), "p", "uid-other", 0, []string{"eth0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.Remove(cp)
			if tc.checkpoint != "" {
				if err := os.WriteFile(cp, []byte(tc.checkpoint), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := srv.GetCalls.Load() + srv.ListCalls.Load()
			pod := netnstest.New(t)
			a := args("c-"+tc.pod, pod, "eth0", e.conf("1.0.0", `"resourceName":"rdma/hca",`+e.ipam("10.13.0.0/24")+`,`+prev))
			a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + tc.pod
			if tc.uid != "" {
				a.Args += ";K8S_POD_UID=" + tc.uid
			}
			res := mustAdd(t, e, a)
			var ifs []string
			for _, i := range res.Interfaces {
				ifs = append(ifs, i.Name)
			}
			if diff := cmp.Diff(tc.wantIfs, ifs); diff != "" {
				t.Errorf("interfaces (-want +got):\n%s", diff)
			}
			if got := srv.GetCalls.Load() + srv.ListCalls.Load() - before; got != tc.wantCalls {
				t.Errorf("kubelet calls = %d, want %d", got, tc.wantCalls)
			}
			if err := e.p.Del(t.Context(), a); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHoldsNoneGPUAligned: a pod the checkpoint shows without a slot of a
// gpuAligned pool is passed through without asking the kubelet for its
// slots and GPUs; one that holds slots is asked for them.
func TestHoldsNoneGPUAligned(t *testing.T) {
	g := newGPUEnv(t, rdma.NetnsExclusive)
	a := gpuPod{name: "a", ctrs: []gpuCtr{{slots: slots(0), gpus: []string{g.uuids[0]}}}}
	g.srv.SetPods(a.kubelet())
	cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	g.p.KubeletCheckpoint = cp
	if err := os.WriteFile(cp, []byte(`{"Data":{"PodDeviceEntries":[{"PodUID":"uid-a","ContainerName":"main","ResourceName":"`+gpuResource+`"}],`+
		`"RegisteredDevices":{"`+gpuResource+`":["slot-0"]}},"Checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid       string
		wantCalls int32
		wantIfs   int
	}{{"uid-plain", 0, 0}, {"uid-a", 1, 1}} {
		calls := g.srv.GetCalls.Load() + g.srv.ListCalls.Load()
		ns := netnstest.New(t)
		args := g.args(a, ns)
		args.Args += ";K8S_POD_UID=" + tc.uid
		res := mustAdd(t, g.env, args)
		if got := g.srv.GetCalls.Load() + g.srv.ListCalls.Load() - calls; got != tc.wantCalls {
			t.Errorf("%s: kubelet calls = %d, want %d", tc.uid, got, tc.wantCalls)
		}
		if len(res.Interfaces) != tc.wantIfs {
			t.Errorf("%s: interfaces %+v, want %d", tc.uid, res.Interfaces, tc.wantIfs)
		}
		if err := g.p.Del(t.Context(), args); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusCheckpoint: the chained entry's STATUS does not ask the kubelet
// while its device checkpoint serves the pool (pods without RDMA pass
// through on it), so a kubelet that does not answer fails no STATUS and
// costs no call every few seconds; without such a checkpoint STATUS asks
// the kubelet and fails without it, as before.
func TestStatusCheckpoint(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	srv := podrestest.Start(t)
	e.socket = srv.Socket
	cp := filepath.Join(t.TempDir(), "kubelet_internal_checkpoint")
	e.p.KubeletCheckpoint = cp
	chained := e.conf("1.1.0", `"resourceName":"rdma/hca"`)
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	calls := func() int32 { return srv.GetCalls.Load() + srv.ListCalls.Load() }

	write(checkpointOf("rdma/hca"))
	srv.Hang.Store(true) // a kubelet that does not answer
	if err := e.p.Status(t.Context(), args("", nil, "", chained)); err != nil || calls() != 0 {
		t.Errorf("STATUS with the checkpoint serving the pool = %v after %d kubelet calls, want success and none", err, calls())
	}
	srv.Hang.Store(false)
	srv.GetDisabled.Store(true)           // the probe pod is unknown either way: the kubelet answered
	write(checkpointOf("nvidia.com/gpu")) // another resource's: it does not serve this pool
	if err := e.p.Status(t.Context(), args("", nil, "", chained)); err != nil || calls() == 0 {
		t.Errorf("STATUS without a checkpoint serving the pool = %v after %d kubelet calls, want success after asking", err, calls())
	}
	e.socket = filepath.Join(t.TempDir(), "no-kubelet.sock")
	chained = e.conf("1.1.0", `"resourceName":"rdma/hca"`)
	if err := e.p.Status(t.Context(), args("", nil, "", chained)); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS without a checkpoint serving the pool or a kubelet = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
	write(checkpointOf("rdma/hca"))
	if err := e.p.Status(t.Context(), args("", nil, "", chained)); err != nil {
		t.Errorf("STATUS without a kubelet, the checkpoint serving the pool = %v, want success", err)
	}
}
