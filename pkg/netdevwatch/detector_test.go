package netdevwatch

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

type view agent.View

func (v view) View() (agent.View, <-chan struct{}) { return agent.View(v), make(chan struct{}) }

// testView: roce (mlx5_30) is the chained pool, aligned is gpuAligned, ib
// gives no netdevs.
func testView() view {
	return view{Pools: []agent.PoolView{
		{Name: "ib", Resource: "rdma.kube-rdma.io/ib", ByID: map[string][]string{"0000:19:00.0": {"mlx5_2"}}},
		{Name: "roce", Resource: "rdma.kube-rdma.io/roce", ByID: map[string][]string{"0000:81:00.2": {"mlx5_30"}, "0000:81:00.3": {"mlx5_31"}}},
		{Name: "aligned", Resource: "rdma.kube-rdma.io/aligned", Binding: config.GPUAligned, ByID: map[string][]string{"aligned-0": {"mlx5_40"}}},
	}}
}

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func apiPod(name string, ready time.Time) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	if !ready.IsZero() {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(ready)}}
	}
	return p
}

func saveRecord(t *testing.T, s attachment.Store, pod string, complete bool, devs ...string) {
	t.Helper()
	a := attachment.Attachment{Key: attachment.Key{ContainerID: "sb-" + pod, IfName: "net1"}, Complete: complete,
		Pod: &attachment.PodRef{Namespace: "ns", Name: pod, UID: "uid-" + pod}}
	for _, d := range devs {
		a.Devices = append(a.Devices, attachment.Device{RDMA: d})
	}
	if err := s.Save(a); err != nil {
		t.Fatal(err)
	}
}

func roce(ids ...string) map[string][]string {
	return map[string][]string{"rdma.kube-rdma.io/roce": ids}
}

// TestDetector: a real PodResources server, attachment records in a temp
// dir, the API server a client-go fake clientset (pods, and the Events the
// recorder posts). Flagged: a chained pod with no record, a gpuAligned pod
// with no binding, both past the grace after their sandbox was ready. Not
// flagged: a pod with its record, one whose sandbox is young, one with no
// sandbox yet, one gone from the API server, one in the host's network
// namespace (no CNI ADD runs for it), one of a pool without netdevs.
func TestDetector(t *testing.T) {
	srv := podrestest.Start(t,
		podrestest.Pod{Namespace: "ns", Name: "ok", Devices: roce("0000:81:00.2")},
		podrestest.Pod{Namespace: "ns", Name: "bad", Devices: roce("0000:81:00.2", "0000:81:00.3")},
		podrestest.Pod{Namespace: "ns", Name: "young", Devices: roce("0000:81:00.3")},
		podrestest.Pod{Namespace: "ns", Name: "nosandbox", Devices: roce("0000:81:00.3")},
		podrestest.Pod{Namespace: "ns", Name: "gone", Devices: roce("0000:81:00.3")},
		podrestest.Pod{Namespace: "ns", Name: "hostnet", Devices: roce("0000:81:00.3")},
		podrestest.Pod{Namespace: "ns", Name: "ib", Devices: map[string][]string{"rdma.kube-rdma.io/ib": {"0000:19:00.0"}}},
		podrestest.Pod{Namespace: "ns", Name: "al", Devices: map[string][]string{"rdma.kube-rdma.io/aligned": {"aligned-0"}}},
	)
	pods, err := grpcclient.Dial(srv.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Close() })
	store := attachment.Store{Dir: filepath.Join(t.TempDir(), "cni")}
	saveRecord(t, store, "ok", true, "mlx5_30")
	saveRecord(t, store, "bad", false, "mlx5_30") // an ADD that never completed
	hostNet := apiPod("hostnet", t0.Add(-time.Hour))
	hostNet.Spec.HostNetwork = true
	cs := fake.NewClientset(hostNet, apiPod("ok", t0.Add(-time.Hour)), apiPod("bad", t0.Add(-time.Hour)), apiPod("young", t0.Add(-time.Second)),
		apiPod("nosandbox", time.Time{}), apiPod("ib", t0.Add(-time.Hour)), apiPod("al", t0.Add(-time.Hour)))
	kube := NewKube(cs, "n1")
	t.Cleanup(kube.Stop)
	now := t0
	d := New(Config{Source: testView(), Pods: pods, Records: store, ChainedPool: "roce", PodInfo: kube, Events: kube,
		Grace: 30 * time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	ready := metav1.NewTime(t0.Add(-time.Hour))
	want := []v1alpha1.PodWithoutNetdevs{
		{Namespace: "ns", Pod: "al", Pool: "aligned", Why: "gpuAligned", Devices: []string{"aligned-0"}, Since: ready},
		{Namespace: "ns", Pod: "bad", Pool: "roce", Why: "chained CNI", Devices: []string{"mlx5_30", "mlx5_31"}, Since: ready},
	}
	if diff := cmp.Diff(want, d.PodsWithoutNetdevs()); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(d.pods); v != 2 {
		t.Errorf("kube_rdma_pods_missing_netdev = %v, want 2", v)
	}
	events := func() []corev1.Event {
		l, err := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Items
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(events()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]string{}
	for _, e := range events() {
		if e.Type != corev1.EventTypeWarning || e.Reason != EventReason || e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.UID != types.UID("uid-"+e.InvolvedObject.Name) {
			t.Errorf("event %+v: want a Warning %s on the pod with its UID", e, EventReason)
		}
		got[e.InvolvedObject.Name] = e.Message
	}
	if len(got) != 2 || !strings.Contains(got["bad"], "pool roce (chained CNI)") || !strings.Contains(got["bad"], "mlx5_30,mlx5_31") ||
		!strings.Contains(got["al"], "pool aligned (gpuAligned)") || !strings.Contains(got["bad"], "delete the pod") {
		t.Errorf("events by pod: %v; want one on bad and one on al naming pool, devices and fix", got)
	}

	// Again: nothing new to say; the young pod passed its grace.
	now = t0.Add(time.Minute)
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if v := testutil.ToFloat64(d.found); v != 3 {
		t.Errorf("kube_rdma_pods_missing_netdev_found_total = %v, want 3 (bad, al, young)", v)
	}
	// bad gets its attachment (a late ADD), the young pod is deleted.
	saveRecord(t, store, "bad", true, "mlx5_30", "mlx5_31")
	srv.SetPods(podrestest.Pod{Namespace: "ns", Name: "al", Devices: map[string][]string{"rdma.kube-rdma.io/aligned": {"aligned-0"}}})
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want[:1], d.PodsWithoutNetdevs()); diff != "" {
		t.Errorf("findings after the fix (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(d.pods); v != 1 {
		t.Errorf("kube_rdma_pods_missing_netdev = %v, want 1", v)
	}
}

// TestDetectorWithoutAPIServer: without PodInfo the grace runs from the
// first sighting; no Event.
func TestDetectorWithoutAPIServer(t *testing.T) {
	srv := podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "bad", Devices: roce("0000:81:00.2")})
	pods, err := grpcclient.Dial(srv.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Close() })
	now := t0
	d := New(Config{Source: testView(), Pods: pods, Records: attachment.Store{Dir: t.TempDir()}, ChainedPool: "roce",
		Grace: 30 * time.Second, Now: func() time.Time { return now }})
	for _, step := range []struct {
		at   time.Duration
		want int
	}{{0, 0}, {29 * time.Second, 0}, {30 * time.Second, 1}} {
		now = t0.Add(step.at)
		if err := d.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(d.PodsWithoutNetdevs()); n != step.want {
			t.Errorf("at +%s: %d findings, want %d", step.at, n, step.want)
		}
	}
	if got := d.PodsWithoutNetdevs()[0].Since.Time; !got.Equal(t0) {
		t.Errorf("since %s, want the first sighting %s", got, t0)
	}
	// No chained pool: nothing to check, and the finding goes.
	d.cfg.ChainedPool = ""
	if err := d.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(d.PodsWithoutNetdevs()); n != 0 {
		t.Errorf("without netdev pools: %d findings", n)
	}
}
