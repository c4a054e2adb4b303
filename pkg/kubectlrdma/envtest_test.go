package kubectlrdma

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// startAPIServer starts kube-apiserver and etcd (envtest) with the chart's
// CRD. Without KUBEBUILDER_ASSETS it skips when defaultAssets lacks them;
// with it, their absence fails the test.
func startAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	dir := apiserverassets.Dir(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "deploy", "helm", "kube-rdma", "crds")},
		ErrorIfCRDPathMissing: true,
	}
	// The fixture pods' device health (status.containerStatuses[].allocatedResourcesStatus):
	// an API server without the gate drops the field (off by default before 1.36).
	env.ControlPlane.GetAPIServer().Configure().Append("feature-gates", "ResourceHealthStatus=true")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd from %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest: %v", err)
		}
	})
	return env, cfg
}

// kubeconfig writes a kubeconfig for user (system:masters for admin).
func kubeconfig(t *testing.T, env *envtest.Environment, cfg *rest.Config, name string, groups ...string) string {
	t.Helper()
	u, err := env.AddUser(envtest.User{Name: name, Groups: groups}, cfg)
	if err != nil {
		t.Fatalf("add user %s: %v", name, err)
	}
	b, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".kubeconfig")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seed creates w's namespaces, Nodes (allocatable through the status
// subresource), Pods (phase likewise) and RDMANodeStates (status likewise).
func seed(t *testing.T, c client.Client, w *world) {
	t.Helper()
	ctx := t.Context()
	must := func(what string, err error) {
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	for _, ns := range []string{"train", "default"} {
		must("namespace "+ns, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	for _, n := range w.nodes {
		obj := n.DeepCopy()
		must("node "+n.Name, c.Create(ctx, obj))
		obj.Status = n.Status
		must("node status "+n.Name, c.Status().Update(ctx, obj))
	}
	uids := map[types.UID]types.UID{} // the fixture's pod UIDs -> the API server's
	for i, p := range w.pods {
		obj := p.DeepCopy()
		must("pod "+p.Name, c.Create(ctx, obj))
		obj.Status = p.Status
		must("pod status "+p.Name, c.Status().Update(ctx, obj))
		if p.UID != "" {
			uids[p.UID] = obj.UID
			w.pods[i].UID = obj.UID
		}
	}
	// The API server gives a pod a UID of its own: the states' claims name
	// pods by it.
	for i := range w.states {
		for j := range w.states[i].Status.Claims {
			pods := w.states[i].Status.Claims[j].Pods
			for k := range pods {
				if uid, ok := uids[types.UID(pods[k].UID)]; ok {
					pods[k].UID = string(uid)
				}
			}
		}
	}
	for _, s := range w.states {
		seedState(t, c, &s)
	}
}

func seedState(t *testing.T, c client.Client, s *v1alpha1.RDMANodeState) {
	t.Helper()
	obj := s.DeepCopy()
	if err := c.Create(t.Context(), obj); err != nil {
		t.Fatalf("rdmanodestate %s: %v", s.Name, err)
	}
	obj.Status = s.Status
	if err := c.Status().Update(t.Context(), obj); err != nil {
		t.Fatalf("rdmanodestate %s status: %v", s.Name, err)
	}
}

// Every golden transcript again, against a real kube-apiserver holding the
// same objects; then the JSON round trip through the API server, a user
// without RBAC, a state from a newer daemon, and the CRD removed.
func TestAgainstAPIServer(t *testing.T) {
	env, cfg := startAPIServer(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t)
	seed(t, c, w)
	admin := kubeconfig(t, env, cfg, "admin", "system:masters")
	t.Setenv("KUBECONFIG", admin) // the binary's path: clientcmd's default loading rules
	for _, tc := range goldenCases {
		t.Run(tc.golden, func(t *testing.T) {
			checkGolden(t, tc.golden, transcript(NewCluster, tc.args))
		})
	}
	t.Run("json", func(t *testing.T) {
		out := transcript(NewCluster, []string{"nodes", "-o", "json"})
		body, _, _ := strings.Cut(strings.SplitN(out, "\n", 2)[1], "--- stderr")
		var l v1alpha1.RDMANodeStateList
		decodeStrict(t, outJSON, body, &l)
		if len(l.Items) != len(w.states) {
			t.Fatalf("%d states, want %d", len(l.Items), len(w.states))
		}
		for _, s := range l.Items {
			want, _ := (&fakeCluster{w: w}).GetState(t.Context(), s.Name)
			if diff := cmp.Diff(want.Status, s.Status); diff != "" {
				t.Errorf("state %s changed through the API server, a field the CRD schema prunes? (-seeded +read):\n%s", s.Name, diff)
			}
		}
	})
	t.Run("table", func(t *testing.T) {
		// The CRD's printer columns carry what nodes prints: the API
		// server's table holds each published summary table, and none for
		// the state whose daemon (v0.2.0) did not publish one.
		cl, err := NewCluster(genericclioptions.NewConfigFlags(false))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := cl.StateTable(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var want []StateRow
		for i := range w.states {
			want = append(want, tableRow(&w.states[i]))
		}
		slices.SortFunc(want, func(a, b StateRow) int { return strings.Compare(a.Name, b.Name) }) // the API server's order
		if diff := cmp.Diff(want, rows, cmp.AllowUnexported(StateRow{})); diff != "" {
			t.Errorf("the API server's table (-seeded +read):\n%s", diff)
		}
		if i := slices.IndexFunc(want, func(r StateRow) bool { return r.Name == "soft-1" }); i < 0 || want[i].Table != nil {
			t.Errorf("soft-1 has a published table: the test does not reach nodes' fallback")
		}
		names, err := cl.NodeNames(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var wantNames []string
		for _, n := range w.nodes {
			wantNames = append(wantNames, n.Name)
		}
		slices.Sort(wantNames)
		if !slices.Equal(names, wantNames) {
			t.Errorf("node names %v, want %v", names, wantNames)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		nobody := kubeconfig(t, env, cfg, "nobody")
		for _, args := range [][]string{{"nodes"}, {"topo", "hgx-1"}, {"pods", "-A"}, {"doctor", "node/hgx-1"}} {
			_, errOut, code := runKubeconfig(nobody, args...)
			if code != 1 || !strings.HasPrefix(errOut, "kubectl-rdma: permission denied: ") || !strings.Contains(errOut, `User "nobody"`) ||
				strings.Count(errOut, "\n") != 1 {
				t.Errorf("%v as nobody: exit %d, stderr %q", args, code, errOut)
			}
		}
	})
	t.Run("newer state", func(t *testing.T) {
		future := w.states[2].DeepCopy()
		future.Name, future.Spec.NodeName, future.ResourceVersion = "future-1", "future-1", ""
		future.Status.StateVersion = v1alpha1.StateVersion + 1
		seedState(t, c, future)
		_, errOut, code := runKubeconfig(admin, "topo", "future-1")
		if code != 1 || !strings.Contains(errOut, "written by a newer daemon (state version 2, this kubectl-rdma reads up to 1): upgrade kubectl-rdma") {
			t.Errorf("topo future-1: exit %d, %q", code, errOut)
		}
	})
	t.Run("no CRD", func(t *testing.T) {
		if err := envtest.UninstallCRDs(cfg, env.CRDInstallOptions); err != nil {
			t.Fatalf("delete the CRD: %v", err)
		}
		waitFor(t, 60*time.Second, func() bool {
			_, errOut, _ := runKubeconfig(admin, "nodes")
			return strings.Contains(errOut, ErrCRDMissing.Error())
		})
		for _, args := range [][]string{{"nodes"}, {"topo", "hgx-1"}, {"pods", "-A"}, {"doctor", "node/hgx-1"}} {
			_, errOut, code := runKubeconfig(admin, args...)
			if code != 1 || errOut != "kubectl-rdma: "+ErrCRDMissing.Error()+"\n" {
				t.Errorf("%v without the CRD: exit %d, stderr %q", args, code, errOut)
			}
		}
	})
}

func runKubeconfig(path string, args ...string) (string, string, int) {
	return runWith(NewCluster, append(args, "--kubeconfig", path)...)
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, d, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting %s: %v", d, err)
	}
}
