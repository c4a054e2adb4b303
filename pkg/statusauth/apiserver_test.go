package statusauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/apiserverassets"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"
)

const chartFiles = "../../deploy/helm/kube-rdma/files"

// daemonUser is the user name of the chart's ServiceAccount (release
// kube-rdma in namespace kube-rdma).
const daemonUser = "system:serviceaccount:kube-rdma:kube-rdma"

// TestStatusAuthAgainstAPIServer: with a real kube-apiserver (RBAC on) the
// filter, as the daemon runs it with the chart's rules, lets a service
// account bound to the chart's metrics-reader rules read /metrics and
// /state, refuses one without (403), a request without a token and a
// garbage token (401), a token for another audience when one is asked for
// (401); and a daemon without the chart's rules fails closed (500).
func TestStatusAuthAgainstAPIServer(t *testing.T) {
	admin := startAPIServer(t)
	ctx := context.Background()
	kube := kubernetes.NewForConfigOrDie(admin)

	bind(t, kube, "kube-rdma", chartRules(t, "status-auth-rules.yaml"), rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: daemonUser})
	bind(t, kube, "kube-rdma-metrics-reader", chartRules(t, "metrics-reader-rules.yaml"),
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"})
	prom := saToken(t, kube, "monitoring", "prometheus", nil)
	promStatus := saToken(t, kube, "monitoring", "prometheus", []string{"kube-rdma-status"})
	other := saToken(t, kube, "default", "other", nil)

	daemon := clientAs(t, admin, daemonUser)
	stranger := clientAs(t, admin, "system:serviceaccount:kube-rdma:not-bound")
	serve := func(c kubernetes.Interface, audiences []string) string {
		f := New(Config{Tokens: c.AuthenticationV1().TokenReviews(), Access: c.AuthorizationV1().SubjectAccessReviews(), Audiences: audiences})
		mux := http.NewServeMux()
		for _, p := range []string{"/metrics", "/state", "/other"} {
			mux.Handle(p, f.Wrap(okHandler))
		}
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	daemonURL := serve(daemon, nil)
	audienceURL := serve(daemon, []string{"kube-rdma-status"})
	strangerURL := serve(stranger, nil)

	type req struct{ name, url, path, token string }
	var got, want []string
	for _, c := range []struct {
		req
		code int
	}{
		{req{"bound scraper", daemonURL, "/metrics", prom}, 200},
		{req{"bound scraper", daemonURL, "/state", prom}, 200},
		{req{"bound scraper, another path", daemonURL, "/other", prom}, 403},
		{req{"unbound account", daemonURL, "/metrics", other}, 403},
		{req{"no token", daemonURL, "/metrics", ""}, 401},
		{req{"garbage token", daemonURL, "/metrics", "garbage"}, 401},
		{req{"token for the asked audience", audienceURL, "/metrics", promStatus}, 200},
		{req{"token for the API server's audience", audienceURL, "/metrics", prom}, 401},
		{req{"daemon without the chart's rules", strangerURL, "/metrics", prom}, 500},
	} {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			r.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		got = append(got, c.name+" "+c.path+": "+http.StatusText(resp.StatusCode))
		want = append(want, c.name+" "+c.path+": "+http.StatusText(c.code))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
}

// startAPIServer starts etcd and kube-apiserver (RBAC on, service account
// tokens issued and reviewed), or skips when their binaries are absent.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	assets := apiserverassets.Dir(t)
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop kube-apiserver and etcd: %v", err)
		}
	})
	return cfg
}

// chartRules reads a ClusterRole's rules from the chart's files.
func chartRules(t *testing.T, name string) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartFiles, name))
	if err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("chart rules %s: %v", name, err)
	}
	return rules
}

// bind creates a ClusterRole with rules and binds it to subject.
func bind(t *testing.T, kube kubernetes.Interface, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRole %s: %v", name, err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding %s: %v", name, err)
	}
}

// saToken creates the namespace and service account when missing and
// returns a token of it (TokenRequest) for audiences (nil: the API
// server's).
func saToken(t *testing.T, kube kubernetes.Interface, ns, name string, audiences []string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create service account %s/%s: %v", ns, name, err)
		}
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token of %s/%s: %v", ns, name, err)
	}
	return tr.Status.Token
}

// clientAs is a client of the API server acting as user (impersonated by
// the admin), as the daemon's own client would with its token.
func clientAs(t *testing.T, admin *rest.Config, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
}
