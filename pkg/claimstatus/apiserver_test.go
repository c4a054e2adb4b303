package claimstatus

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// counter counts a client's requests by method.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) RoundTrip(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.n[r.Method]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// noView is the agent's view of a node that serves no device plugin
// pool: the chained pool is the DRA front end's, and device names are
// the claim records'.
type noView struct{}

func (noView) View() (agent.View, <-chan struct{}) { return agent.View{}, nil }

// recordsDir lists claim records as cmd/device-plugin does.
type recordsDir string

func (d recordsDir) Claims() ([]claimrecord.Record, error) {
	recs, _, err := claimrecord.ReadAll(string(d))
	return recs, err
}

// userWith binds the chart's rules of files to a ServiceAccount of its
// own and returns a config authenticated as it whose requests c counts.
func userWith(t *testing.T, env *envtest.Environment, admin kubernetes.Interface, name string, c *counter, files ...string) *rest.Config {
	t.Helper()
	var rules []rbacv1.PolicyRule
	for _, f := range files {
		data, err := os.ReadFile("../../deploy/helm/kube-rdma/files/" + f)
		if err != nil {
			t.Fatal(err)
		}
		var r []rbacv1.PolicyRule
		if err := yaml.UnmarshalStrict(data, &r); err != nil {
			t.Fatalf("chart rules %s: %v", f, err)
		}
		rules = append(rules, r...)
	}
	ctx := context.Background()
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-rdma", Name: name}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "system:serviceaccount:kube-rdma:" + name, Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := u.Config()
	cfg.Wrap(c.RoundTrip)
	return cfg
}

// TestWriterAgainstAPIServer: the writer under exactly the chart's
// files/dra-rules.yaml and files/claim-status-rules.yaml on a real API
// server (v1.34, DRAResourceClaimDeviceStatus on by default): a claim
// allocated as the scheduler does gets the entry of its attached device
// (interface, IPs, MAC, Ready), and none for its device not attached yet;
// a steady node makes no request, a restarted writer one GET and no write;
// a second ADD adds its entry, keeping the first's transition time; DEL
// removes the entry, Unprepare the rest; a claim created again under the
// name is not written; without the status rule the write is refused,
// counted and retried after its backoff only.
func TestWriterAgainstAPIServer(t *testing.T) {
	assets := apiserverassets.Dir(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "train"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reqs := &counter{n: map[string]int{}}
	kube := kubernetes.NewForConfigOrDie(userWith(t, env, admin, "kube-rdma", reqs, "dra-rules.yaml", "claim-status-rules.yaml"))

	const podUID = "0d6c1a35-0000-4000-8000-0000000000a1"
	pool := claimrecord.DRAPool("node-a", "roce")
	devs := []string{"pci-0000-3b-00-0", "pci-0000-3b-00-1"}
	allocate := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := admin.ResourceV1().ResourceClaims("train").Create(ctx, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "train", Name: name},
			Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "nics",
				Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "roce.rdma.kube-rdma.io", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}}}}},
			metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// As the scheduler allocates and reserves it.
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "nics", Driver: claimrecord.DriverName, Pool: pool, Device: devs[0]},
			{Request: "nics", Driver: claimrecord.DriverName, Pool: pool, Device: devs[1]}}}}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer-0", UID: podUID}}
		if c, err = admin.ResourceV1().ResourceClaims("train").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	claim := allocate("nics")

	// The DRA front end's record of the prepared claim, the CNI plugin's of
	// its ADD (mlx5_0 attached as net1; mlx5_1 not yet).
	claimsDir := t.TempDir()
	rec := claimrecord.Record{UID: string(claim.UID), Namespace: "train", Name: "nics", PodUIDs: []string{podUID}, Devices: []claimrecord.Device{
		{Request: "nics", Pool: pool, Device: devs[0], RDMA: "mlx5_0", PCIAddress: "0000:3b:00.0"},
		{Request: "nics", Pool: pool, Device: devs[1], RDMA: "mlx5_1", PCIAddress: "0000:3b:00.1"}}}
	if err := claimrecord.Write(claimsDir, rec); err != nil {
		t.Fatal(err)
	}
	store := attachment.Store{Dir: t.TempDir()}
	pod := &attachment.PodRef{Namespace: "train", Name: "trainer-0", UID: podUID}
	add := func(container, ifName, rdma, mac string, ips ...string) attachment.Key {
		t.Helper()
		k := attachment.Key{ContainerID: container, IfName: ifName}
		if err := store.Save(attachment.Attachment{Key: k, Pod: pod, Complete: true, Devices: []attachment.Device{
			{RDMA: rdma, PodIfName: ifName, PodMAC: mac, IPAM: len(ips) > 0, IPs: ips}}}); err != nil {
			t.Fatal(err)
		}
		return k
	}
	first := add("c1", "net1", "mlx5_0", "b8:ce:f6:00:00:01", "10.56.0.7/16", "fd00::7/64")

	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	newWriter := func(c Client) *Writer {
		return New(Config{Source: noView{}, Claims: recordsDir(claimsDir), Records: store, Client: c, ChainedPool: "roce",
			Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	}
	w := newWriter(NewKube(kube, "node-a"))
	sync := func(w *Writer) {
		t.Helper()
		if err := w.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) []resourceapi.AllocatedDeviceStatus {
		t.Helper()
		c, err := admin.ResourceV1().ResourceClaims("train").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status.Allocation == nil || len(c.Status.ReservedFor) != 1 {
			t.Errorf("claim %s lost its allocation or reservation: %+v", name, c.Status)
		}
		for i := range c.Status.Devices {
			for j := range c.Status.Devices[i].Conditions {
				c.Status.Devices[i].Conditions[j].ObservedGeneration = 0
			}
		}
		return c.Status.Devices
	}
	entry := func(dev, ifName, mac string, since time.Time, ips ...string) resourceapi.AllocatedDeviceStatus {
		return resourceapi.AllocatedDeviceStatus{Driver: claimrecord.DriverName, Pool: pool, Device: dev,
			Conditions: []metav1.Condition{{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonAttached,
				Message: "netdev " + ifName + " is in the pod", LastTransitionTime: metav1.NewTime(since)}},
			NetworkData: &resourceapi.NetworkDeviceData{InterfaceName: ifName, IPs: ips, HardwareAddress: mac}}
	}
	checkReqs := func(what string, want map[string]int) {
		t.Helper()
		if diff := cmp.Diff(want, reqs.take()); diff != "" {
			t.Errorf("%s: requests by method (-want +got):\n%s", what, diff)
		}
	}

	sync(w)
	e1 := entry(devs[0], "net1", "b8:ce:f6:00:00:01", now, "10.56.0.7/16", "fd00::7/64")
	if diff := cmp.Diff([]resourceapi.AllocatedDeviceStatus{e1}, status("nics")); diff != "" {
		t.Errorf("status after ADD (-want +got):\n%s", diff)
	}
	checkReqs("first sync", map[string]int{"GET": 1, "PATCH": 1})

	// Steady: nothing.
	for range 5 {
		now = now.Add(time.Minute)
		sync(w)
	}
	checkReqs("steady", map[string]int{})
	// A restarted writer reads each claim once and writes nothing.
	restarted := newWriter(NewKube(kube, "node-a"))
	sync(restarted)
	sync(restarted)
	checkReqs("restarted writer", map[string]int{"GET": 1})

	// A second ADD: its entry, the first's transition time kept.
	add("c1", "net2", "mlx5_1", "b8:ce:f6:00:00:02")
	now = now.Add(time.Minute)
	sync(w)
	e2 := entry(devs[1], "net2", "b8:ce:f6:00:00:02", now)
	if diff := cmp.Diff([]resourceapi.AllocatedDeviceStatus{e1, e2}, status("nics")); diff != "" {
		t.Errorf("status after the second ADD (-want +got):\n%s", diff)
	}
	checkReqs("second ADD", map[string]int{"PATCH": 1})

	// DEL of the first: its entry goes.
	if err := store.Delete(first); err != nil {
		t.Fatal(err)
	}
	sync(w)
	if diff := cmp.Diff([]resourceapi.AllocatedDeviceStatus{e2}, status("nics")); diff != "" {
		t.Errorf("status after DEL (-want +got):\n%s", diff)
	}
	checkReqs("DEL", map[string]int{"PATCH": 1})

	// Unprepare (the record goes, the attachment's DEL not seen): the rest goes, and the claim is forgotten.
	if err := claimrecord.Remove(claimsDir, rec.UID); err != nil {
		t.Fatal(err)
	}
	sync(w)
	sync(w)
	if got := status("nics"); len(got) != 0 {
		t.Errorf("status after Unprepare %+v, want none", got)
	}
	checkReqs("Unprepare", map[string]int{"PATCH": 1})

	// The claim deleted and created again under its name, while the
	// writer knows the old one: the new one is not written, nothing retried.
	if err := claimrecord.Write(claimsDir, rec); err != nil {
		t.Fatal(err)
	}
	sync(w)
	checkReqs("prepared again", map[string]int{"GET": 1, "PATCH": 1})
	if err := admin.ResourceV1().ResourceClaims("train").Delete(ctx, "nics", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	allocate("nics")
	add("c1", "net1", "mlx5_0", "b8:ce:f6:00:00:03")
	sync(w)
	sync(w)
	if got := status("nics"); len(got) != 0 {
		t.Errorf("status of the claim created again %+v, want none", got)
	}
	if n := reqs.take(); n["PATCH"] != 1 {
		t.Errorf("requests for the claim created again %v, want one refused PATCH", n)
	}
	sync(w)
	checkReqs("claim gone, its record still there", map[string]int{})
	if got := testutil.ToFloat64(w.writes.WithLabelValues("error")); got != 0 {
		t.Errorf("writes_total{error} = %v after a claim created again, want 0", got)
	}

	// Without the status rule: refused, counted, pending, and retried
	// only once its backoff (1 s, then 2 s) passed.
	if err := claimrecord.Remove(claimsDir, rec.UID); err != nil {
		t.Fatal(err)
	}
	claim = allocate("other")
	rec.UID, rec.Name = string(claim.UID), "other"
	if err := claimrecord.Write(claimsDir, rec); err != nil {
		t.Fatal(err)
	}
	noStatus := &counter{n: map[string]int{}}
	denied := newWriter(NewKube(kubernetes.NewForConfigOrDie(userWith(t, env, admin, "dra-only", noStatus, "dra-rules.yaml")), "node-a"))
	sync(denied)
	if got := testutil.ToFloat64(denied.writes.WithLabelValues("error")); got != 1 {
		t.Errorf("writes_total{error} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(denied.pending); got != 1 {
		t.Errorf("pending = %v, want 1", got)
	}
	if diff := cmp.Diff(map[string]int{"GET": 1, "PATCH": 1}, noStatus.take()); diff != "" {
		t.Errorf("refused write: requests (-want +got):\n%s", diff)
	}
	now = now.Add(500 * time.Millisecond)
	sync(denied)
	if n := noStatus.take(); len(n) != 0 {
		t.Errorf("requests before the backoff passed: %v", n)
	}
	now = now.Add(time.Second)
	sync(denied)
	if diff := cmp.Diff(map[string]int{"PATCH": 1}, noStatus.take()); diff != "" {
		t.Errorf("retry: requests (-want +got):\n%s", diff)
	}
	// The API server's own check: an entry names a device allocated in the claim.
	bad := applyConfig(claimRef{"train", "other", rec.UID}, entries{{Pool: pool, Device: "pci-0000-99-00-0"}: {IfName: "net1", Ready: true}}, map[devKey]time.Time{{Pool: pool, Device: "pci-0000-99-00-0"}: now})
	if err := NewKube(kube, "node-a").ApplyStatus(ctx, bad); err == nil || errors.Is(err, ErrClaimGone) {
		t.Errorf("apply of a device not allocated = %v, want refused", err)
	} else {
		t.Logf("device not allocated: %v", err)
	}
	err = denied.cfg.Client.ApplyStatus(ctx, applyConfig(claimRef{"train", "other", rec.UID}, nil, nil))
	if err == nil || errors.Is(err, ErrClaimGone) || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("apply without the status rule = %v, want forbidden", err)
	}
}
