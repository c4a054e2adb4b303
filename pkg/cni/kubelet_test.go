package cni

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// staleSocket returns the path of a unix socket nobody listens on any more
// (a kubelet that is restarting): connecting is refused.
func staleSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = l.Close()
	return path
}

// hangingSocket returns the path of a unix socket whose server accepts and
// never answers (a kubelet that hangs).
func hangingSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	return path
}

// TestKubeletAnswers: what each answer of the kubelet's PodResources API
// does to an ADD, with a deviceID (Multus) and standalone. Only a missing
// socket skips the "allocated to this pod" check (unless
// requirePodResources); a pod the kubelet does not know has nothing
// allocated; every other failure refuses the ADD.
func TestKubeletAnswers(t *testing.T) {
	e := newEnv(t, 2, false, "shared")
	pods := []podrestest.Pod{{Namespace: "ns", Name: "p", Devices: map[string][]string{"rdma/hca": {"mlx5_0"}}}}
	prev := `"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}]}`
	type kubelet func(t *testing.T) string // sets the kubelet up, returns its socket
	serve := func(set func(*podrestest.Server)) kubelet {
		return func(t *testing.T) string {
			srv := podrestest.Start(t, pods...)
			set(srv)
			return srv.Socket
		}
	}
	missing := func(t *testing.T) string { return filepath.Join(t.TempDir(), "kubelet.sock") }
	for _, tc := range []struct {
		name    string
		kubelet kubelet
		extra   string // netconf fields
		pod     string // K8S_POD_NAME
		want    uint   // CNI code; 0: attached
		attach  int    // standalone: interfaces added to prevResult
		warn    bool   // a warning is logged
	}{
		{name: "multus allocated", kubelet: serve(func(*podrestest.Server) {}), extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p"},
		{name: "multus not allocated", kubelet: serve(func(*podrestest.Server) {}), extra: `"runtimeConfig":{"deviceID":"mlx5_1"}`, pod: "p", want: CodeNotAllocated},
		{name: "multus get disabled, not allocated", kubelet: serve(func(s *podrestest.Server) { s.GetDisabled.Store(true) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_1"}`, pod: "p", want: CodeNotAllocated},
		{name: "multus get disabled, allocated", kubelet: serve(func(s *podrestest.Server) { s.GetDisabled.Store(true) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p"},
		{name: "multus unknown pod", kubelet: serve(func(*podrestest.Server) {}), extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "other", want: CodeNotAllocated},
		{name: "multus unknown pod, get disabled", kubelet: serve(func(s *podrestest.Server) { s.GetDisabled.Store(true) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "other", want: CodeNotAllocated},
		{name: "multus kubelet error", kubelet: serve(func(s *podrestest.Server) { s.Fail(errors.New("internal error")) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p", want: types.ErrInternal},
		{name: "multus kubelet unavailable", kubelet: serve(func(s *podrestest.Server) { s.Fail(status.Error(codes.Unavailable, "shutting down")) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p", want: types.ErrTryAgainLater},
		{name: "multus kubelet hangs", kubelet: hangingSocket, extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p", want: types.ErrTryAgainLater},
		{name: "multus kubelet not answering", kubelet: staleSocket, extra: `"runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p", want: types.ErrTryAgainLater},
		{name: "multus resourceName: only its allocations count", kubelet: serve(func(*podrestest.Server) {}),
			extra: `"resourceName":"other/res","runtimeConfig":{"deviceID":"mlx5_0"}`, pod: "p", want: CodeNotAllocated},
		{name: "multus without pod name: not checked", kubelet: serve(func(*podrestest.Server) {}), extra: `"runtimeConfig":{"deviceID":"mlx5_1"}`},
		{name: "multus without pod name, required", kubelet: serve(func(*podrestest.Server) {}),
			extra: `"requirePodResources":true,"runtimeConfig":{"deviceID":"mlx5_0"}`, want: types.ErrInvalidEnvironmentVariables},
		{name: "multus no such device: 100 before asking the kubelet", kubelet: serve(func(s *podrestest.Server) { s.Fail(errors.New("internal error")) }),
			extra: `"runtimeConfig":{"deviceID":"mlx5_9"}`, pod: "other", want: CodeDeviceNotFound},
		{name: "multus no socket skips the check", kubelet: missing, extra: `"runtimeConfig":{"deviceID":"mlx5_1"}`, pod: "p", warn: true},
		{name: "multus no socket, required", kubelet: missing, extra: `"requirePodResources":true,"runtimeConfig":{"deviceID":"mlx5_0"}`,
			pod: "p", want: types.ErrPluginNotAvailable},
		{name: "standalone get disabled", kubelet: serve(func(s *podrestest.Server) { s.GetDisabled.Store(true) }),
			extra: `"resourceName":"rdma/hca",` + prev, pod: "p", attach: 1},
		{name: "standalone unknown pod passes prevResult through", kubelet: serve(func(*podrestest.Server) {}),
			extra: `"resourceName":"rdma/hca",` + prev, pod: "other", warn: true},
		{name: "standalone kubelet error", kubelet: serve(func(s *podrestest.Server) { s.Fail(errors.New("internal error")) }),
			extra: `"resourceName":"rdma/hca",` + prev, pod: "p", want: types.ErrInternal},
		{name: "standalone kubelet not answering", kubelet: staleSocket, extra: `"resourceName":"rdma/hca",` + prev, pod: "p", want: types.ErrTryAgainLater},
		{name: "standalone no socket", kubelet: missing, extra: `"resourceName":"rdma/hca",` + prev, pod: "p", want: types.ErrPluginNotAvailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.socket = tc.kubelet(t)
			pod := netnstest.New(t)
			before := e.snapshot(pod)
			a := args("c1", pod, "eth0", e.conf("1.1.0", tc.extra))
			if tc.pod != "" {
				a.Args = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + tc.pod
			}
			var logs bytes.Buffer
			e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // the hanging kubelet's timeout
			defer cancel()
			res, err := e.p.Add(ctx, a)
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tc.warn {
				t.Errorf("warning logged: %v, want %v:\n%s", warned, tc.warn, logs.String())
			}
			if err == nil {
				defer func() {
					if err := e.p.Del(context.Background(), a); err != nil {
						t.Errorf("DEL: %v", err)
					}
				}()
			}
			if got := cniCode(err); got != tc.want {
				t.Fatalf("ADD: code %d (%v), want %d", got, err, tc.want)
			}
			if err != nil {
				if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
					t.Errorf("refused ADD changed the host (-before +after):\n%s", diff)
				}
				return
			}
			if strings.HasPrefix(tc.extra, `"resourceName"`) && len(res.Interfaces) != 1+tc.attach {
				t.Errorf("result interfaces %d, want prevResult's 1 + %d", len(res.Interfaces), tc.attach)
			}
		})
	}
}

// TestCheckStandaloneWithoutRecord: CHECK of a standalone attachment that
// has no record (the pod had no devices) succeeds without asking the kubelet.
func TestCheckStandaloneWithoutRecord(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	a := args("c1", netnstest.New(t), "eth0", e.conf("1.1.0", `"resourceName":"rdma/hca"`))
	a.Args = podArgs
	if err := e.p.Check(context.Background(), a); err != nil {
		t.Errorf("CHECK: %v", err)
	}
}
