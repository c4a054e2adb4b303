package nodestate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/client/clientset"
)

const chart = "../../deploy/helm/kube-rdma"

// serviceAccountUser is the user name of the chart's ServiceAccount (release
// kube-rdma in namespace kube-rdma), which an RBAC subject of kind
// ServiceAccount matches.
const serviceAccountUser = "system:serviceaccount:kube-rdma:kube-rdma"

// startAPIServer starts etcd and kube-apiserver (RBAC on) with the chart's
// CRD, or skips when their binaries are absent.
func startAPIServer(t *testing.T) (*envtest.Environment, *rest.Config) {
	t.Helper()
	return startAPIServerWith(t, filepath.Join(chart, "crds"))
}

// startAPIServerWith starts one with the CRDs of crds.
func startAPIServerWith(t *testing.T, crds string) (*envtest.Environment, *rest.Config) {
	t.Helper()
	assets := apiserverassets.Dir(t)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{crds},
		ErrorIfCRDPathMissing: true,
	}
	// A fixed certificate directory: the restarted API server keeps its
	// serving certificate, so clients made before the restart still trust it.
	env.ControlPlane.GetAPIServer().CertDir = t.TempDir()
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	return env, cfg
}

// writerFor is the daemon's Client as cmd/device-plugin builds it: the core
// and kube-rdma typed clients on one rest.Config and one HTTP client.
func writerFor(t *testing.T, cfg *rest.Config) *Client {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	rdma, err := clientset.NewForConfigAndClient(cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	return NewClient(kube.CoreV1(), rdma.RDMAV1alpha1())
}

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, rbacv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// chartRules reads the ClusterRole's rules from the chart.
func chartRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chart, "files", "node-state-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("chart rules: %v", err)
	}
	return rules
}

// chartUser binds the chart's rules to the chart's ServiceAccount, as the
// chart does, and returns a client config authenticated as that account.
func chartUser(t *testing.T, env *envtest.Environment, admin client.Client) *rest.Config {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"}, Rules: chartRules(t)}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kube-rdma"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kube-rdma"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "kube-rdma", Name: "kube-rdma"}}}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	u, err := env.AddUser(envtest.User{Name: serviceAccountUser, Groups: []string{"system:authenticated"}}, nil)
	if err != nil {
		t.Fatalf("add user: %v", err)
	}
	return u.Config()
}

func createNode(t *testing.T, admin client.Client, name string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := admin.Create(context.Background(), n); err != nil {
		t.Fatalf("create node: %v", err)
	}
	return n
}

// countingWriter counts the writes that reached the API server.
type countingWriter struct {
	w     Writer
	count chan struct{}
}

func (c *countingWriter) Apply(ctx context.Context, node string, st *v1alpha1.RDMANodeStateStatus) error {
	err := c.w.Apply(ctx, node, st)
	if err == nil {
		c.count <- struct{}{}
	}
	return err
}

func (c *countingWriter) writes() int {
	n := 0
	for {
		select {
		case <-c.count:
			n++
		default:
			return n
		}
	}
}

func get(t *testing.T, admin client.Client, name string) *v1alpha1.RDMANodeState {
	t.Helper()
	var o v1alpha1.RDMANodeState
	if err := admin.Get(context.Background(), client.ObjectKey{Name: name}, &o); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Logf("get rdmanodestate %s: %v", name, err)
		return nil
	}
	return &o
}
