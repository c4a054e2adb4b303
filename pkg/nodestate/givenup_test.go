package nodestate

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// TestBuildGivenUp: the CNI plugin's give-ups as status.givenUp, in their
// order, at most MaxGivenUp, each field fitted to the schema: a pod name
// that is not one is left out, unprintable runes are replaced, a netdev
// name is cut at 15 bytes.
func TestBuildGivenUp(t *testing.T) {
	at := now.Add(-time.Hour).Truncate(time.Second)
	in := []cniops.GiveUp{
		{Time: at.Add(1500 * time.Millisecond), Command: "DEL", PodNamespace: "ml", PodName: "trainer-0", PodUID: "u1", RDMA: "mlx5_3",
			Netdev: "ens1f0v2", Function: "0000:3b:00.3", Reason: cniops.GiveUpNotBack},
		{Time: at, Command: "GC", PodNamespace: "ML", PodName: "x", RDMA: "mlx5\x1b[31m_9", Netdev: "a-netdev-name-too-long",
			Function: "mlx5_core.sf.2\u202e", Reason: cniops.GiveUpGone},
		{Time: at, Command: "D E L", RDMA: "mlx5_4", Reason: "Not A Reason"},
	}
	st := Build(Input{View: testView(), GiveUps: in, Now: now})
	want := []v1alpha1.DeviceGivenUp{
		{Time: metav1.NewTime(at.Add(time.Second).UTC()), Command: "DEL", Namespace: "ml", Pod: "trainer-0", Device: "mlx5_3",
			Netdev: "ens1f0v2", Function: "0000:3b:00.3", Reason: "not-back"},
		{Time: metav1.NewTime(at.UTC()), Command: "GC", Device: "mlx5?[31m_9", Netdev: "a-netdev-name-t",
			Function: "mlx5_core.sf.2?", Reason: "function-gone"},
		{Time: metav1.NewTime(at.UTC()), Device: "mlx5_4"},
	}
	if diff := cmp.Diff(want, st.GivenUp); diff != "" {
		t.Errorf("givenUp (-want +got):\n%s", diff)
	}
	var many []cniops.GiveUp
	for i := range MaxGivenUp + 3 {
		many = append(many, cniops.GiveUp{Time: at, Command: "DEL", RDMA: fmt.Sprintf("mlx5_%d", i), Reason: cniops.GiveUpVanished})
	}
	st = Build(Input{View: testView(), GiveUps: many, Now: now})
	if len(st.GivenUp) != MaxGivenUp || st.GivenUp[0].Device != "mlx5_0" {
		t.Errorf("%d give-ups in: %d published, first %+v; want the first %d", len(many), len(st.GivenUp), st.GivenUp[0], MaxGivenUp)
	}
	if st := Build(Input{View: testView(), Now: now}); st.GivenUp != nil {
		t.Errorf("no give-ups: givenUp %v", st.GivenUp)
	}
}

// TestPrintable: the runes the schema refuses, replaced; cut on a rune
// boundary.
func TestPrintable(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"mlx5_0", 15, "mlx5_0"},
		{"a\x00b\x7fc\u0085d\u200be\ufefff\xff", 64, "a?b?c?d?e?f?"},
		{"ab\u00e9", 3, "ab"}, // é is two bytes
		{strings.Repeat("x", 20), 15, strings.Repeat("x", 15)},
	} {
		if got := printable(c.in, c.max); got != c.want {
			t.Errorf("printable(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}

type fakeGiveUps struct {
	mu  sync.Mutex
	got []cniops.GiveUp
}

func (f *fakeGiveUps) GiveUps(time.Time) []cniops.GiveUp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

func (f *fakeGiveUps) set(g ...cniops.GiveUp) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = g
}

// TestPublisherGivenUp: a give-up shows at the next poll.
func TestPublisherGivenUp(t *testing.T) {
	src, w, g := newFakeSource(testView()), &fakeWriter{}, &fakeGiveUps{}
	startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, GiveUps: g, Interval: 10 * time.Millisecond, PodPoll: 20 * time.Millisecond})
	eventually(t, "the first write", 5*time.Second, func() bool { return w.count() >= 1 })
	if len(w.last().GivenUp) != 0 {
		t.Fatalf("givenUp before any: %+v", w.last().GivenUp)
	}
	g.set(cniops.GiveUp{Time: now, Command: "DEL", RDMA: "mlx5_30", Reason: cniops.GiveUpVanished})
	eventually(t, "a write with the give-up", 5*time.Second, func() bool {
		gu := w.last().GivenUp
		return len(gu) == 1 && gu[0].Device == "mlx5_30" && gu[0].Reason == "vanished"
	})
}

// TestGivenUpAgainstAPIServer: a full status.givenUp built from give-ups
// whose fields the schema would refuse as they are (unprintable runes,
// too long, a pod name that is not one) is accepted by a real API server
// with the chart's CRD, as Build fitted it.
func TestGivenUpAgainstAPIServer(t *testing.T) {
	_, cfg := startAPIServer(t)
	admin := newClient(t, cfg)
	createNode(t, admin, "n1")
	var in []cniops.GiveUp
	for i := range MaxGivenUp + 4 {
		in = append(in, cniops.GiveUp{Time: now.Add(-time.Duration(i) * time.Minute), Command: "DEL", PodNamespace: "ml", PodName: fmt.Sprintf("Pod_%d", i),
			RDMA: fmt.Sprintf("mlx5_%d\x1b\u202e%s", i, strings.Repeat("x", 300)), Netdev: "a-netdev-name-too-long\x00", Function: "0000:3b:00.3\n",
			Reason: cniops.GiveUpNotBack})
	}
	st := Build(Input{View: testView(), GiveUps: in, Now: now})
	if err := writerFor(t, cfg).Apply(t.Context(), "n1", &st); err != nil {
		t.Fatalf("the API server refused the status: %v", err)
	}
	o := get(t, admin, "n1")
	if o == nil || len(o.Status.GivenUp) != MaxGivenUp {
		t.Fatalf("stored: %+v", o)
	}
	if diff := cmp.Diff(st.GivenUp, o.Status.GivenUp); diff != "" {
		t.Errorf("stored givenUp (-built +stored):\n%s", diff)
	}
}
