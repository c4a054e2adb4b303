package nodestate

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

// portDown returns a view in which dev's ports are DOWN and dev unhealthy,
// as the node watcher publishes it after a link goes down.
func portDown(dev string) func(agent.View) agent.View {
	return func(v agent.View) agent.View {
		v = setHealth(dev, false)(v)
		n := *v.Snapshot.Node
		n.RDMADevices = slices.Clone(n.RDMADevices)
		for i, d := range n.RDMADevices {
			if d.Name == dev {
				d.Ports = slices.Clone(d.Ports)
				for j := range d.Ports {
					d.Ports[j].State, d.Ports[j].PhysState = "DOWN", "Disabled"
				}
				n.RDMADevices[i] = d
			}
		}
		s := *v.Snapshot
		s.Node = &n
		v.Snapshot = &s
		return v
	}
}

func deviceOf(o *v1alpha1.RDMANodeState, name string) v1alpha1.Device {
	for _, d := range o.Status.Devices {
		if d.Name == name {
			return d
		}
	}
	return v1alpha1.Device{}
}

func isDown(o *v1alpha1.RDMANodeState, dev string) bool {
	if o == nil {
		return false
	}
	d := deviceOf(o, dev)
	return !d.Healthy && len(d.Ports) > 0 && d.Ports[0].State == "DOWN"
}

// TestPublishToAPIServer runs the publisher as the chart's ServiceAccount,
// bound to the chart's ClusterRole only, against a real kube-apiserver.
func TestPublishToAPIServer(t *testing.T) {
	env, cfg := startAPIServer(t)
	admin := newClient(t, cfg)
	node := createNode(t, admin, "n1")
	saCfg := chartUser(t, env, admin)
	c := writerFor(t, saCfg)
	w := &countingWriter{w: c, count: make(chan struct{}, 100)}
	src := newFakeSource(testView())
	claims := &dirClaims{dir: filepath.Join(t.TempDir(), "claims")}
	const interval = 200 * time.Millisecond
	// The claim records are read at every poll: a steady node still
	// writes nothing.
	p := startPublisher(t, Config{NodeName: "n1", Source: src, Writer: w, Claims: claims, DaemonVersion: "v-test",
		Interval: interval, MaxBackoff: time.Second, PodPoll: interval / 2})

	var o *v1alpha1.RDMANodeState
	eventually(t, "the object with its status", 30*time.Second, func() bool {
		o = get(t, admin, "n1")
		return o != nil && o.Status.StateVersion == v1alpha1.StateVersion
	})
	t.Run("created with owner and status", func(t *testing.T) {
		want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n1", UID: node.UID}}
		if !slices.Equal(o.OwnerReferences, want) || o.Spec.NodeName != "n1" {
			t.Errorf("owner %+v, spec %+v; want owner %+v, spec.nodeName n1", o.OwnerReferences, o.Spec, want)
		}
		if o.Status.DaemonVersion != "v-test" || !cmp.Equal(o.Status.Summary, v1alpha1.Summary{Devices: 3, Unhealthy: 1, GPUs: 1,
			Table: &v1alpha1.SummaryTable{Pools: "ib 0/1/2, roce 0/2/2", UnhealthyDevices: "mlx5_10", LinkLayers: "Ethernet,InfiniBand"}}) {
			t.Errorf("status daemon %q summary %+v", o.Status.DaemonVersion, o.Status.Summary)
		}
		for _, mf := range o.ManagedFields {
			if mf.Manager != FieldManager || mf.Operation != metav1.ManagedFieldsOperationApply {
				t.Errorf("managed fields entry %s/%s (subresource %q), want only %s/Apply", mf.Manager, mf.Operation, mf.Subresource, FieldManager)
			}
		}
	})
	t.Run("a port going down updates it", func(t *testing.T) {
		src.set(portDown("mlx5_2"))
		eventually(t, "mlx5_2 DOWN in the status", 10*time.Second, func() bool {
			o = get(t, admin, "n1")
			return isDown(o, "mlx5_2")
		})
		if o.Status.Summary.Unhealthy != 2 {
			t.Errorf("summary %+v, want 2 unhealthy", o.Status.Summary)
		}
	})
	t.Run("a prepared claim shows, with its pod and shares", func(t *testing.T) {
		r := claimrecord.Record{UID: "9f3c2a1e-0000-4000-8000-000000000001", Namespace: "train", Name: "worker-0-nic",
			PodUIDs: []string{"5d1e9a7c-0000-4000-8000-000000000002"},
			Devices: []claimrecord.Device{{Request: "nic", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMA: "mlx5_30", PCIAddress: "0000:81:00.2"},
				{Request: "mon/any", Pool: "n1/ib", Device: "pci-0000-19-00-0", RDMA: "mlx5_2", PCIAddress: "0000:19:00.0", AdminAccess: true}}}
		if err := claimrecord.Write(claims.dir, r); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the claim in the status", 10*time.Second, func() bool {
			o = get(t, admin, "n1")
			return o != nil && len(o.Status.Claims) == 1
		})
		want := []v1alpha1.Claim{{Namespace: "train", Name: "worker-0-nic", UID: r.UID, Pods: []v1alpha1.ClaimPod{{UID: r.PodUIDs[0]}},
			Devices: []v1alpha1.ClaimDevice{{Request: "nic", Pool: "n1/roce", Device: "pci-0000-81-00-2", RDMADevice: "mlx5_30"},
				{Request: "mon/any", Pool: "n1/ib", Device: "pci-0000-19-00-0", RDMADevice: "mlx5_2", AdminAccess: true}}}}
		if diff := cmp.Diff(want, o.Status.Claims); diff != "" {
			t.Errorf("claims (-want +got):\n%s", diff)
		}
		if s := deviceOf(o, "mlx5_30").Shares; s == nil || *s != (v1alpha1.Shares{Used: 1}) {
			t.Errorf("mlx5_30's shares %+v, want 1 used", s)
		}
		if s := deviceOf(o, "mlx5_2").Shares; s != nil {
			t.Errorf("mlx5_2's shares %+v, want none (admin access)", s)
		}
	})
	t.Run("no change, no write", func(t *testing.T) {
		// The last subtest returns at the first write showing the port down; a
		// write coalesced behind it may still land. Start from a quiet publisher.
		for i := 0; i < 10 && w.writes() != 0; i++ {
			time.Sleep(2 * interval)
		}
		o = get(t, admin, "n1")
		rv := o.ResourceVersion
		for range 3 {
			src.set(func(v agent.View) agent.View { return v })
		}
		time.Sleep(3 * interval) // proving an absence: give a wrong write time to happen
		if n := w.writes(); n != 0 {
			t.Errorf("%d writes without a change", n)
		}
		if o = get(t, admin, "n1"); o.ResourceVersion != rv {
			t.Errorf("resourceVersion %s, was %s", o.ResourceVersion, rv)
		}
	})
	t.Run("an unprepared claim goes", func(t *testing.T) {
		if err := claimrecord.Remove(claims.dir, "9f3c2a1e-0000-4000-8000-000000000001"); err != nil {
			t.Fatal(err)
		}
		eventually(t, "no claim in the status", 10*time.Second, func() bool {
			o = get(t, admin, "n1")
			return o != nil && len(o.Status.Claims) == 0 && deviceOf(o, "mlx5_30").Shares == nil && o.Status.Summary.Claims == 0
		})
	})
	t.Run("the chart's role allows nothing more", func(t *testing.T) {
		forbidden(t, newClient(t, saCfg), o)
	})
	t.Run("every verb of the chart's role is needed", func(t *testing.T) {
		needed(t, env, admin)
	})
	t.Run("a deleted object is created again", func(t *testing.T) {
		if err := admin.Delete(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		src.set(portDown("mlx5_30"))
		eventually(t, "the object again, mlx5_30 DOWN", 10*time.Second, func() bool {
			o = get(t, admin, "n1")
			return isDown(o, "mlx5_30") && len(o.OwnerReferences) == 1
		})
	})
	t.Run("publishing resumes after an API server restart", func(t *testing.T) {
		api := env.ControlPlane.GetAPIServer()
		if err := api.Stop(); err != nil {
			t.Fatalf("stop kube-apiserver: %v", err)
		}
		src.set(setHealth("mlx5_30", true))
		eventually(t, "a failed write reported", 10*time.Second, func() bool { return p.Report().Failures > 0 })
		if err := api.Start(); err != nil {
			t.Fatalf("start kube-apiserver again: %v", err)
		}
		eventually(t, "mlx5_30 healthy after the restart", 30*time.Second, func() bool {
			o = get(t, admin, "n1")
			return o != nil && deviceOf(o, "mlx5_30").Healthy
		})
		if r := p.Report(); !r.OK || r.LastError != "" {
			t.Errorf("report after the restart: %+v", r)
		}
	})
}

// forbidden checks that c, the chart's ServiceAccount, can do nothing
// beyond what publishing needs.
func forbidden(t *testing.T, c client.Client, o *v1alpha1.RDMANodeState) {
	ctx := context.Background()
	mine := o.DeepCopy()
	mine.ResourceVersion = ""
	other := &v1alpha1.RDMANodeState{}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	tries := []struct {
		what string
		do   func() error
	}{
		{"get rdmanodestate", func() error { return c.Get(ctx, client.ObjectKey{Name: "n1"}, other) }},
		{"list rdmanodestates", func() error { return c.List(ctx, &v1alpha1.RDMANodeStateList{}) }},
		{"update rdmanodestate", func() error { return c.Update(ctx, o.DeepCopy()) }},
		{"delete rdmanodestate", func() error { return c.Delete(ctx, mine) }},
		{"update rdmanodestate status", func() error { return c.Status().Update(ctx, o.DeepCopy()) }},
		{"list nodes", func() error { return c.List(ctx, &corev1.NodeList{}) }},
		{"patch node", func() error {
			return c.Patch(ctx, node, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`)))
		}},
		{"delete node", func() error { return c.Delete(ctx, node) }},
		{"get configmap", func() error {
			return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kube-root-ca.crt"}, &corev1.ConfigMap{})
		}},
		{"list pods", func() error { return c.List(ctx, &corev1.PodList{}) }},
	}
	for _, try := range tries {
		if err := try.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s as the chart's ServiceAccount: %v, want forbidden", try.what, err)
		}
	}
}

// needed checks that without any one verb of the chart's rules the first
// publication of a node fails: the role is no wider than it must be.
func needed(t *testing.T, env *envtest.Environment, admin client.Client) {
	ctx := context.Background()
	rules := chartRules(t)
	for i, r := range rules {
		for j, verb := range r.Verbs {
			name := fmt.Sprintf("without-%s-%s", strings.ReplaceAll(r.Resources[0], "/", "-"), verb)
			less := slices.Clone(rules)
			less[i].Verbs = slices.Delete(slices.Clone(r.Verbs), j, j+1)
			if len(less[i].Verbs) == 0 {
				less = slices.Delete(less, i, i+1)
			}
			role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: less}
			binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}}
			for _, o := range []client.Object{role, binding} {
				if err := admin.Create(ctx, o); err != nil {
					t.Fatalf("create %T: %v", o, err)
				}
			}
			createNode(t, admin, name)
			u, err := env.AddUser(envtest.User{Name: name}, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := writerFor(t, u.Config())
			st := Build(Input{View: testView(), Now: time.Now()})
			if err := c.Apply(ctx, name, &st); !apierrors.IsForbidden(err) {
				t.Errorf("publish without %s on %s: %v, want forbidden", verb, r.Resources[0], err)
			}
		}
	}
}

// TestPublishWithPreviousCRD: Helm never upgrades a chart's crds/, so after
// helm upgrade this daemon writes to the previous release's CRD, which has
// no status.summary.table (testdata/crd-before-summary-table, a CRD from
// before that field). Server-side apply refuses a status with a field the
// schema lacks, so the writer leaves such a field out (and says so) and the
// rest of the status is written (docs/upgrades.md).
func TestPublishWithPreviousCRD(t *testing.T) {
	_, cfg := startAPIServerWith(t, filepath.Join("testdata", "crd-before-summary-table"))
	admin := newClient(t, cfg)
	createNode(t, admin, "n1")
	st := Build(Input{View: testView(), DaemonVersion: "v-test", Now: time.Now()})
	if st.Summary.Table == nil {
		t.Fatal("Build wrote no summary table: the test tests nothing")
	}
	if err := writerFor(t, cfg).Apply(t.Context(), "n1", &st); err != nil {
		t.Fatalf("apply to the previous CRD: %v", err)
	}
	o := get(t, admin, "n1")
	if o == nil || o.Status.DaemonVersion != "v-test" || len(o.Status.Devices) != len(st.Devices) {
		t.Fatalf("status not written: %+v", o)
	}
	if o.Status.Summary.Table != nil {
		t.Errorf("summary.table %+v kept by a CRD without it", o.Status.Summary.Table)
	}
}
