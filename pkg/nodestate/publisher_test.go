package nodestate

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// fakeSource is a daemon view the test changes.
type fakeSource struct {
	mu      sync.Mutex
	view    agent.View
	changed chan struct{}
}

func newFakeSource(v agent.View) *fakeSource {
	return &fakeSource{view: v, changed: make(chan struct{})}
}

func (f *fakeSource) View() (agent.View, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.view, f.changed
}

// set replaces the view through fn (which must not modify the old one in
// place) and signals the change.
func (f *fakeSource) set(fn func(agent.View) agent.View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.view = fn(f.view)
	close(f.changed)
	f.changed = make(chan struct{})
}

// setHealth returns a view in which device dev has the given health.
func setHealth(dev string, ok bool) func(agent.View) agent.View {
	return func(v agent.View) agent.View {
		s := *v.Snapshot
		s.Healthy = map[string]bool{}
		for k, h := range v.Snapshot.Healthy {
			s.Healthy[k] = h
		}
		s.Healthy[dev] = ok
		v.Snapshot = &s
		return v
	}
}

// fakeWriter records writes; fail makes them fail.
type fakeWriter struct {
	mu     sync.Mutex
	writes []v1alpha1.RDMANodeStateStatus
	at     []time.Time
	fail   error
}

func (w *fakeWriter) Apply(_ context.Context, _ string, st *v1alpha1.RDMANodeStateStatus) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail != nil {
		return w.fail
	}
	w.writes, w.at = append(w.writes, *st), append(w.at, time.Now())
	return nil
}

func (w *fakeWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

func (w *fakeWriter) setFail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = err
}

func (w *fakeWriter) last() v1alpha1.RDMANodeStateStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes[len(w.writes)-1]
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func startPublisher(t *testing.T, cfg Config) *Publisher {
	t.Helper()
	p := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p
}

func TestPublisherCoalescesAndSkipsUnchanged(t *testing.T) {
	src, w := newFakeSource(testView()), &fakeWriter{}
	interval := 300 * time.Millisecond
	p := startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, Interval: interval, PodPoll: time.Hour})
	eventually(t, "the first write", 5*time.Second, func() bool { return w.count() == 1 })
	// Three changes within one interval: one more write, with the last.
	src.set(setHealth("mlx5_10", true))
	src.set(setHealth("mlx5_2", false))
	src.set(setHealth("mlx5_30", false))
	eventually(t, "the coalesced write", 5*time.Second, func() bool { return w.count() == 2 })
	got := w.last()
	if got.Summary.Unhealthy != 2 {
		t.Errorf("coalesced write: %d unhealthy devices, want 2 (mlx5_2, mlx5_30)", got.Summary.Unhealthy)
	}
	if gap := w.at[1].Sub(w.at[0]); gap < interval-20*time.Millisecond {
		t.Errorf("two writes %s apart, want at least %s", gap, interval)
	}
	// A change back and forth within an interval, and a new view with the
	// same content: nothing to write.
	src.set(setHealth("mlx5_10", false))
	src.set(setHealth("mlx5_10", true))
	src.set(func(v agent.View) agent.View { return v })
	time.Sleep(3 * interval) // nothing to poll for: the absence of a write
	if n := w.count(); n != 2 {
		t.Errorf("%d writes after changes that change nothing, want 2", n)
	}
	if r := p.Report(); !r.OK || r.Writes != 2 {
		t.Errorf("report %+v, want ok with 2 writes", r)
	}
}

func TestPublisherRetriesWithBackoff(t *testing.T) {
	src, w := newFakeSource(testView()), &fakeWriter{}
	w.setFail(errors.New("connection refused"))
	p := startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, Interval: 20 * time.Millisecond,
		MaxBackoff: 100 * time.Millisecond, PodPoll: time.Hour})
	eventually(t, "failures reported", 5*time.Second, func() bool { return p.Report().Failures >= 3 })
	if r := p.Report(); r.OK || r.LastError == "" {
		t.Errorf("report while failing: %+v", r)
	}
	if err := testutil.CollectAndCompare(p, strings.NewReader(`
# HELP kube_rdma_node_state_publisher_ok 1 once an RDMANodeState write succeeded and the last attempt did not fail, 0 otherwise.
# TYPE kube_rdma_node_state_publisher_ok gauge
kube_rdma_node_state_publisher_ok 0
`), "kube_rdma_node_state_publisher_ok"); err != nil {
		t.Errorf("metrics while failing: %v", err)
	}
	w.setFail(nil)
	eventually(t, "the write after the outage", 5*time.Second, func() bool { return w.count() == 1 })
	if r := p.Report(); !r.OK || r.Failures != 0 || r.LastError != "" {
		t.Errorf("report after the outage: %+v", r)
	}
	if err := testutil.CollectAndCompare(p, strings.NewReader(`
# HELP kube_rdma_node_state_publisher_ok 1 once an RDMANodeState write succeeded and the last attempt did not fail, 0 otherwise.
# TYPE kube_rdma_node_state_publisher_ok gauge
kube_rdma_node_state_publisher_ok 1
# HELP kube_rdma_node_state_write_failures RDMANodeState writes that failed since the last successful one.
# TYPE kube_rdma_node_state_write_failures gauge
kube_rdma_node_state_write_failures 0
# HELP kube_rdma_node_state_writes_total Successful RDMANodeState writes since the daemon started.
# TYPE kube_rdma_node_state_writes_total counter
kube_rdma_node_state_writes_total 1
`)); err != nil {
		t.Errorf("metrics after the outage: %v", err)
	}
}

// TestPublisherFollowsAllocations: allocations come from a real PodResources
// gRPC server, polled; a pod that goes away leaves the status at the next poll.
func TestPublisherFollowsAllocations(t *testing.T) {
	srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "p", Container: "nccl",
		Devices: map[string][]string{"rdma.kube-rdma.io/ib": {"0000:19:00.0"}, "nvidia.com/gpu": {"GPU-1"}}})
	pods, err := grpcclient.Dial(srv.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	src, w := newFakeSource(testView()), &fakeWriter{}
	startPublisher(t, Config{NodeName: "n1", Source: src, Pods: pods, Writer: w, Interval: 20 * time.Millisecond,
		PodPoll: 50 * time.Millisecond})
	eventually(t, "the allocation published", 5*time.Second, func() bool { return w.count() > 0 })
	want := []v1alpha1.Allocation{{Namespace: "ns", Pod: "p", Container: "nccl", Resource: "rdma.kube-rdma.io/ib",
		DeviceIDs: []string{"0000:19:00.0"}, RDMADevices: []string{"mlx5_2"}, Netdevs: []string{"ib2"}}}
	if diff := cmp.Diff(want, w.last().Allocations); diff != "" {
		t.Errorf("allocations (-want +got):\n%s", diff)
	}
	if got := w.last().Pools[0].Allocated; got != 1 {
		t.Errorf("pool ib allocated %d, want 1", got)
	}
	srv.SetPods()
	eventually(t, "the pod gone from the status", 5*time.Second, func() bool {
		return w.count() > 1 && len(w.last().Allocations) == 0 && w.last().Summary.Pods == 0
	})
}

// testClock is a Config.Now the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// failingPods is a kubelet whose PodResources List fails.
type failingPods struct{}

func (failingPods) List(context.Context) ([]podresources.ContainerDevices, error) {
	return nil, errors.New("list pod resources: grpc status 4: context deadline exceeded")
}

// A quiet node (no change for longer than Refresh) is written again, the
// same content with a new lastUpdate, so that the object's age says whether
// its daemon is alive (doctor's "daemon state fresh"); before Refresh, with
// a negative Refresh, and while the kubelet's allocations cannot be listed
// (the status is not current then), nothing is written.
func TestPublisherRefreshesQuietNode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refresh time.Duration
		pods    PodLister
		rewrite bool
	}{{"refresh", time.Minute, nil, true}, {"never", -1, nil, false}, {"kubelet not answering", time.Minute, failingPods{}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &testClock{now: time.Date(2026, 11, 27, 20, 0, 0, 0, time.UTC)}
			src, w := newFakeSource(testView()), &fakeWriter{}
			startPublisher(t, Config{NodeName: "n1", Source: src, Pods: tc.pods, Writer: w, Interval: 10 * time.Millisecond,
				PodPoll: 10 * time.Millisecond, Refresh: tc.refresh, Now: clock.Now})
			eventually(t, "the first write", 5*time.Second, func() bool { return w.count() == 1 })
			first := w.last()
			clock.add(59 * time.Second)
			time.Sleep(200 * time.Millisecond) // 20 polls: the absence of a write
			if n := w.count(); n != 1 {
				t.Fatalf("%d writes 59 s into a 1 min refresh, want 1", n)
			}
			clock.add(time.Second)
			if !tc.rewrite {
				time.Sleep(200 * time.Millisecond)
				if n := w.count(); n != 1 {
					t.Fatalf("%d writes with refresh %s, want 1", n, tc.refresh)
				}
				return
			}
			eventually(t, "the refresh write", 5*time.Second, func() bool { return w.count() == 2 })
			got := w.last()
			if want := first.LastUpdate.Add(time.Minute); !got.LastUpdate.Time.Equal(want) {
				t.Errorf("refresh write: lastUpdate %s, want %s", got.LastUpdate, want)
			}
			if !sameContent(&got, &first) {
				t.Errorf("refresh write changed the content: %s", cmp.Diff(first, got))
			}
			time.Sleep(200 * time.Millisecond)
			if n := w.count(); n != 2 {
				t.Errorf("%d writes after the refresh, want 2 (the next one a minute later)", n)
			}
		})
	}
}
