package nodestate

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func missing(ns, pod, pool string, devs ...string) v1alpha1.PodWithoutNetdevs {
	return v1alpha1.PodWithoutNetdevs{Namespace: ns, Pod: pod, Pool: pool, Why: "chained CNI", Devices: devs,
		Since: metav1.NewTime(now.Truncate(time.Second))}
}

// TestBuildPodsWithoutNetdevs: the detector's findings, sorted.
func TestBuildPodsWithoutNetdevs(t *testing.T) {
	in := []v1alpha1.PodWithoutNetdevs{missing("b", "p", "roce", "mlx5_30"), missing("a", "q", "roce", "mlx5_30"), missing("a", "p", "roce", "mlx5_30")}
	st := Build(Input{View: testView(), PodsWithoutNetdevs: in, Now: now})
	want := []v1alpha1.PodWithoutNetdevs{missing("a", "p", "roce", "mlx5_30"), missing("a", "q", "roce", "mlx5_30"), missing("b", "p", "roce", "mlx5_30")}
	if diff := cmp.Diff(want, st.PodsWithoutNetdevs); diff != "" {
		t.Errorf("podsWithoutNetdevs (-want +got):\n%s", diff)
	}
	if in[0].Namespace != "b" {
		t.Error("Build sorted its input in place")
	}
	if st := Build(Input{View: testView(), Now: now}); st.PodsWithoutNetdevs != nil {
		t.Errorf("no findings: podsWithoutNetdevs %v", st.PodsWithoutNetdevs)
	}
}

type fakeMissing struct {
	mu   sync.Mutex
	pods []v1alpha1.PodWithoutNetdevs
}

func (f *fakeMissing) PodsWithoutNetdevs() []v1alpha1.PodWithoutNetdevs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods
}

func (f *fakeMissing) set(p ...v1alpha1.PodWithoutNetdevs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = p
}

// TestPublisherPodsWithoutNetdevs: a finding shows at the next poll, and
// its end too.
func TestPublisherPodsWithoutNetdevs(t *testing.T) {
	src, w, m := newFakeSource(testView()), &fakeWriter{}, &fakeMissing{}
	startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, Missing: m, Interval: 10 * time.Millisecond, PodPoll: 20 * time.Millisecond})
	eventually(t, "the first write", 5*time.Second, func() bool { return w.count() >= 1 })
	m.set(missing("ns", "p", "roce", "mlx5_30"))
	eventually(t, "a write with the finding", 5*time.Second, func() bool { return len(w.last().PodsWithoutNetdevs) == 1 })
	m.set()
	eventually(t, "a write without it", 5*time.Second, func() bool { return len(w.last().PodsWithoutNetdevs) == 0 })
}
