package netdevwatch

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/grpcclient"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// claimDir is the ClaimLister of a claims directory.
type claimDir string

func (d claimDir) Claims() ([]claimrecord.Record, error) {
	recs, _, err := claimrecord.ReadAll(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return recs, err
}

// apiClaim is claim c-<pod> reserved for pod <pod>.
func apiClaim(pod string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c-" + pod, UID: types.UID("claim-" + pod)}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	return c
}

// TestDetectorDRA: the chained pool rdma_dra is the DRA front end's (not in
// the view); the pods come from the claim records, named through their
// claims' reservedFor. Flagged: dbad, whose claim's device has no
// attachment. Not flagged: dok (attached), dplain (a claim of pool other,
// whose pods get no netdevs), dgone (its claim gone from the API server:
// an Unprepare to come), dyoung (sandbox within the grace).
func TestDetectorDRA(t *testing.T) {
	srv := podrestest.Start(t)
	pods, err := grpcclient.Dial(srv.Socket, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pods.Close() })
	dir := t.TempDir()
	store := attachment.Store{Dir: filepath.Join(dir, "cni")}
	claims := filepath.Join(dir, "claims")
	for pod, dev := range map[string]claimrecord.Device{
		"dbad":   {Request: "nic", Pool: claimrecord.DRAPool("n1", "rdma_dra"), Device: "d50", RDMA: "mlx5_50"},
		"dok":    {Request: "nic", Pool: claimrecord.DRAPool("n1", "rdma_dra"), Device: "d51", RDMA: "mlx5_51"},
		"dplain": {Request: "nic", Pool: claimrecord.DRAPool("n1", "other"), Device: "d52", RDMA: "mlx5_52"},
		"dgone":  {Request: "nic", Pool: claimrecord.DRAPool("n1", "rdma_dra"), Device: "d53", RDMA: "mlx5_53"},
		"dyoung": {Request: "nic", Pool: claimrecord.DRAPool("n1", "rdma_dra"), Device: "d54", RDMA: "mlx5_54"},
	} {
		if err := claimrecord.Write(claims, claimrecord.Record{UID: "claim-" + pod, Namespace: "ns", Name: "c-" + pod,
			PodUIDs: []string{"uid-" + pod}, Devices: []claimrecord.Device{dev}}); err != nil {
			t.Fatal(err)
		}
	}
	saveRecord(t, store, "dok", true, "mlx5_51")
	cs := fake.NewClientset(apiPod("dbad", t0.Add(-time.Hour)), apiPod("dok", t0.Add(-time.Hour)), apiPod("dplain", t0.Add(-time.Hour)),
		apiPod("dgone", t0.Add(-time.Hour)), apiPod("dyoung", t0.Add(-time.Second)),
		apiClaim("dbad"), apiClaim("dok"), apiClaim("dplain"), apiClaim("dyoung"))
	kube := NewKube(cs, "n1")
	t.Cleanup(kube.Stop)
	d := New(Config{Source: testView(), Pods: pods, Records: store, ChainedPool: "rdma_dra", Claims: claimDir(claims),
		PodInfo: kube, Finder: kube, Events: kube, Grace: 30 * time.Second, Now: func() time.Time { return t0 }})
	ctx := context.Background()
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.PodWithoutNetdevs{{Namespace: "ns", Pod: "dbad", Pool: "rdma_dra", Why: "DRA chained CNI",
		Devices: []string{"mlx5_50"}, Since: metav1.NewTime(t0.Add(-time.Hour))}}
	if diff := cmp.Diff(want, d.PodsWithoutNetdevs()); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
	if v := testutil.ToFloat64(d.pods); v != 1 {
		t.Errorf("kube_rdma_pods_missing_netdev = %v, want 1", v)
	}
	var events []corev1.Event
	for deadline := time.Now().Add(10 * time.Second); len(events) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		l, err := cs.CoreV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		events = l.Items
	}
	if len(events) != 1 || events[0].InvolvedObject.Name != "dbad" || events[0].InvolvedObject.UID != "uid-dbad" || events[0].Reason != EventReason {
		t.Fatalf("events %+v: want one %s on dbad", events, EventReason)
	}
	for _, s := range []string{"pod ns/dbad", "mlx5_50", "pool rdma_dra", "driver rdma.kube-rdma.io", "delete the pod"} {
		if !strings.Contains(events[0].Message, s) {
			t.Errorf("event message %q does not say %q", events[0].Message, s)
		}
	}

	// Its attachment comes (a late ADD): the finding goes.
	saveRecord(t, store, "dbad", true, "mlx5_50")
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(d.PodsWithoutNetdevs()); n != 0 {
		t.Errorf("findings after the attachment: %v", d.PodsWithoutNetdevs())
	}

	// Without the DRA front end (no Claims), rdma_dra is no pool of the
	// node: nothing is checked.
	d = New(Config{Source: testView(), Pods: pods, Records: attachment.Store{Dir: t.TempDir()}, ChainedPool: "rdma_dra",
		PodInfo: kube, Finder: kube, Grace: 30 * time.Second, Now: func() time.Time { return t0 }})
	if err := d.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(d.PodsWithoutNetdevs()); n != 0 {
		t.Errorf("findings without claims: %v", d.PodsWithoutNetdevs())
	}
}
