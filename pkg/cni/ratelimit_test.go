package cni

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// passPrev is a primary plugin's result for a chained (standalone) ADD to
// pass through.
const passPrev = `"prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}]}`

// gpuPods are pods with no RDMA device: the kubelet lists them, with a GPU
// each, and a chained ADD passes their prevResult through.
func gpuPods(n int) []podrestest.Pod {
	var pods []podrestest.Pod
	for i := range n {
		pods = append(pods, podrestest.Pod{Namespace: "ns", Name: fmt.Sprintf("p%d", i),
			Devices: map[string][]string{"nvidia.com/gpu": {fmt.Sprintf("GPU-%d", i)}}})
	}
	return pods
}

// TestBurstUnderKubeletRateLimit: a burst of pod starts, none of them with
// RDMA, on a chained pool, against the kubelet's PodResources rate limit
// (100 calls a second, bursts of 10, the excess answered ResourceExhausted):
// every ADD passes its prevResult through; none is code 11.
func TestBurstUnderKubeletRateLimit(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	const n = 40
	srv := podrestest.Start(t, gpuPods(n)...)
	srv.RateLimit(100, 10)
	e.socket = srv.Socket
	podNS := netnstest.New(t)
	conf := e.conf("1.1.0", `"resourceName":"rdma/hca",`+passPrev)
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a := args(fmt.Sprintf("c%d", i), podNS, "eth0", conf)
			a.Args = fmt.Sprintf("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p%d", i)
			<-start
			_, errs[i] = e.p.Add(context.Background(), a)
		})
	}
	began := time.Now()
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("ADD of pod p%d: code %d: %v", i, cniCode(err), err)
		}
	}
	if srv.Exhausted.Load() == 0 {
		t.Errorf("the rate limit rejected no call: the burst did not reach it")
	}
	t.Logf("%d ADDs in %s: %d calls, %d rejected by the rate limit", n, time.Since(began).Round(time.Millisecond),
		srv.GetCalls.Load()+srv.ListCalls.Load(), srv.Exhausted.Load())
}

// TestRateLimitedKubeletWithinBudget: a kubelet that answers every call
// ResourceExhausted is asked again until the budget is spent, never past
// it (the caller's deadline, or podResourcesTimeout without one), and the
// ADD is code 11 with a message that names the tries the kubelet saw.
func TestRateLimitedKubeletWithinBudget(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	for _, tc := range []struct {
		name     string
		deadline time.Duration // the caller's; 0: none
		budget   time.Duration
	}{
		{name: "caller's deadline", deadline: 1500 * time.Millisecond, budget: 1500 * time.Millisecond},
		{name: "no deadline", budget: podResourcesTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := podrestest.Start(t, gpuPods(1)...)
			srv.RateLimit(0, 0)
			e.socket = srv.Socket
			a := args("c1", netnstest.New(t), "eth0", e.conf("1.1.0", `"resourceName":"rdma/hca",`+passPrev))
			a.Args = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p0"
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			began := time.Now()
			_, err := e.p.Add(ctx, a)
			took := time.Since(began)
			if got := cniCode(err); got != types.ErrTryAgainLater {
				t.Fatalf("ADD: code %d (%v), want %d", got, err, types.ErrTryAgainLater)
			}
			calls := srv.GetCalls.Load() + srv.ListCalls.Load()
			t.Logf("%d calls in %s: %v", calls, took.Round(time.Millisecond), err)
			if calls < 2 {
				t.Errorf("the kubelet was asked %d times, want tries until the budget is spent", calls)
			}
			// The last try may be cut by the deadline (the caller's, or the
			// budget's own without one) before the kubelet counts it: then it
			// is one try more than the calls seen, and its answer is the
			// deadline, not the kubelet's (seen on a loaded machine in the
			// no-deadline case: 17 tries, 16 calls).
			msg := err.Error()
			counted := strings.Contains(msg, fmt.Sprintf("%d tries", calls)) && strings.Contains(msg, "rejected by rate limit")
			cut := strings.Contains(msg, fmt.Sprintf("%d tries", calls+1)) && strings.Contains(msg, "deadline exceeded")
			if !counted && !cut {
				t.Errorf("error %q does not name the tries (%d, or %d with the last cut by the deadline) and the last answer", err, calls, calls+1)
			}
			// It gives up rather than wait past the budget: at most one
			// wait (retryMax) early, and no later than the budget plus
			// the return of a refused ADD.
			if took < tc.budget-retryMax || took > tc.budget+200*time.Millisecond {
				t.Errorf("ADD took %s, want within (%s, %s]", took, tc.budget-retryMax, tc.budget+200*time.Millisecond)
			}
		})
	}
}

// TestGetDisabledRemembered: against a kubelet that does not serve Get
// (1.27-1.33 by default), the first invocation asks Get then List, and
// later invocations (each a new process in production, each a new client
// here: nothing but the state dir carries over) ask List once and Get
// never. A restarted kubelet (a new socket) is asked Get again, once: one
// that serves it is then asked Get only; one that still does not is
// remembered again.
func TestGetDisabledRemembered(t *testing.T) {
	e := newEnv(t, 1, false, "shared")
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	var srv *podrestest.Server
	restart := func(getDisabled bool) {
		var old os.FileInfo
		if srv != nil {
			old, _ = os.Stat(socket)
			srv.Stop()
		}
		srv = podrestest.StartAt(t, socket, gpuPods(1)...)
		srv.GetDisabled.Store(getDisabled)
		if old != nil {
			// A kubelet restarts in seconds, this one in microseconds:
			// below ext4's timestamp granularity, in a socket that may get
			// the old one's inode.
			later := old.ModTime().Add(time.Second)
			if err := os.Chtimes(socket, later, later); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.socket = socket
	type calls struct{ Gets, Lists int32 }
	for i, step := range []struct {
		name    string
		restart *bool // restart the kubelet first, Get disabled or not
		want    calls
	}{
		{name: "first: Get, then List", restart: ptr(true), want: calls{1, 1}},
		{name: "second: List only", want: calls{0, 1}},
		{name: "third: List only", want: calls{0, 1}},
		{name: "restarted, serves Get: Get", restart: ptr(false), want: calls{1, 0}},
		{name: "then Get only", want: calls{1, 0}},
		{name: "restarted, Get disabled: Get, then List", restart: ptr(true), want: calls{1, 1}},
		{name: "then List only", want: calls{0, 1}},
	} {
		if step.restart != nil {
			restart(*step.restart)
		}
		gets, lists := srv.GetCalls.Load(), srv.ListCalls.Load()
		a := args(fmt.Sprintf("c%d", i), netnstest.New(t), "eth0", e.conf("1.1.0", `"resourceName":"rdma/hca",`+passPrev))
		a.Args = "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p0"
		if _, err := e.p.Add(context.Background(), a); err != nil {
			t.Fatalf("%s: ADD: %v", step.name, err)
		}
		got := calls{srv.GetCalls.Load() - gets, srv.ListCalls.Load() - lists}
		if diff := cmp.Diff(step.want, got); diff != "" {
			t.Errorf("%s: calls at the kubelet (-want +got):\n%s", step.name, diff)
		}
	}
}

func ptr[T any](v T) *T { return &v }
