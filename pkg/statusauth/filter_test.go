package statusauth

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAPI answers TokenReviews and SubjectAccessReviews through the fake
// clientset's reactors, from a table of tokens and of who may get which
// path, and counts the calls.
type fakeAPI struct {
	mu        sync.Mutex
	users     map[string]authnv1.UserInfo // token -> user
	audiences []string                    // what the API server says every token is valid for
	allowed   map[string][]string         // user name -> paths
	fail      error                       // every call fails with it
	trs, sars int
	lastTR    authnv1.TokenReviewSpec
	lastSAR   authzv1.SubjectAccessReviewSpec
}

func (a *fakeAPI) filter(cfg Config) *Filter {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.trs++
		if a.fail != nil {
			return true, nil, a.fail
		}
		tr := act.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		a.lastTR = tr.Spec
		if u, ok := a.users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: a.audiences}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	c.PrependReactor("create", "subjectaccessreviews", func(act k8stesting.Action) (bool, runtime.Object, error) {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.sars++
		if a.fail != nil {
			return true, nil, a.fail
		}
		sar := act.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		a.lastSAR = sar.Spec
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.ResourceAttributes == nil && na != nil && na.Verb == "get" &&
			slices.Contains(a.allowed[sar.Spec.User], na.Path)
		return true, sar, nil
	})
	cfg.Tokens = c.AuthenticationV1().TokenReviews()
	cfg.Access = c.AuthorizationV1().SubjectAccessReviews()
	return New(cfg)
}

func (a *fakeAPI) calls() [2]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return [2]int{a.trs, a.sars}
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "payload\n") })

func get(t *testing.T, h http.Handler, method, path, authz string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	if authz != "" {
		r.Header.Set("Authorization", authz)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func newAPI() *fakeAPI {
	return &fakeAPI{
		users: map[string]authnv1.UserInfo{
			"prom-token":  {Username: "system:serviceaccount:monitoring:prometheus", UID: "u1", Groups: []string{"system:serviceaccounts", "system:authenticated"}, Extra: map[string]authnv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prom-0"}}},
			"other-token": {Username: "system:serviceaccount:default:other", UID: "u2", Groups: []string{"system:authenticated"}},
		},
		allowed: map[string][]string{"system:serviceaccount:monitoring:prometheus": {"/metrics", "/state"}},
	}
}

func TestFilter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		method    string
		path      string
		authz     string
		wantCode  int
		wantCalls [2]int // TokenReviews, SubjectAccessReviews
	}{
		{"allowed /metrics", http.MethodGet, "/metrics", "Bearer prom-token", http.StatusOK, [2]int{1, 1}},
		{"allowed /state, scheme in lower case", http.MethodGet, "/state", "bearer prom-token", http.StatusOK, [2]int{1, 1}},
		{"HEAD is get", http.MethodHead, "/metrics", "Bearer prom-token", http.StatusOK, [2]int{1, 1}},
		{"authenticated, not allowed", http.MethodGet, "/metrics", "Bearer other-token", http.StatusForbidden, [2]int{1, 1}},
		{"allowed elsewhere, not this path", http.MethodGet, "/other", "Bearer prom-token", http.StatusForbidden, [2]int{1, 1}},
		{"no token", http.MethodGet, "/metrics", "", http.StatusUnauthorized, [2]int{0, 0}},
		{"empty bearer", http.MethodGet, "/metrics", "Bearer ", http.StatusUnauthorized, [2]int{0, 0}},
		{"basic, not bearer", http.MethodGet, "/metrics", "Basic cHJvbTpwcm9t", http.StatusUnauthorized, [2]int{0, 0}},
		{"garbage token", http.MethodGet, "/metrics", "Bearer garbage", http.StatusUnauthorized, [2]int{1, 0}},
		{"POST refused before any call", http.MethodPost, "/metrics", "Bearer prom-token", http.StatusMethodNotAllowed, [2]int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPI()
			h := api.filter(Config{}).Wrap(okHandler)
			code, body := get(t, h, tc.method, tc.path, tc.authz)
			if code != tc.wantCode {
				t.Errorf("%s %s with %q: %d %q, want %d", tc.method, tc.path, tc.authz, code, body, tc.wantCode)
			}
			if (code == http.StatusOK) != (body == "payload\n" || tc.method == http.MethodHead) {
				t.Errorf("code %d, body %q: the handler ran iff the request passed", code, body)
			}
			if diff := cmp.Diff(tc.wantCalls, api.calls()); diff != "" {
				t.Errorf("API calls [TokenReviews SARs] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFilterAsksForTheUser: the SubjectAccessReview carries the
// authenticated user whole (name, UID, groups, extra) and a non-resource
// get of the request's path; the TokenReview carries the token and the
// configured audiences.
func TestFilterAsksForTheUser(t *testing.T) {
	api := newAPI()
	api.audiences = []string{"kube-rdma-status"}
	h := api.filter(Config{Audiences: []string{"kube-rdma-status"}}).Wrap(okHandler)
	if code, body := get(t, h, http.MethodGet, "/state", "Bearer prom-token"); code != http.StatusOK {
		t.Fatalf("GET /state: %d %q", code, body)
	}
	if diff := cmp.Diff(authnv1.TokenReviewSpec{Token: "prom-token", Audiences: []string{"kube-rdma-status"}}, api.lastTR); diff != "" {
		t.Errorf("TokenReview spec (-want +got):\n%s", diff)
	}
	want := authzv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:monitoring:prometheus", UID: "u1",
		Groups:                []string{"system:serviceaccounts", "system:authenticated"},
		Extra:                 map[string]authzv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prom-0"}},
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: "/state", Verb: "get"},
	}
	if diff := cmp.Diff(want, api.lastSAR); diff != "" {
		t.Errorf("SubjectAccessReview spec (-want +got):\n%s", diff)
	}
}

// TestFilterAudiences: a token the API server authenticates, but for none of
// the audiences asked for, is refused.
func TestFilterAudiences(t *testing.T) {
	for _, tc := range []struct {
		name      string
		want, got []string
		wantCode  int
	}{
		{"none asked: any", nil, []string{"https://kubernetes.default.svc"}, http.StatusOK},
		{"asked and valid for it", []string{"a", "kube-rdma-status"}, []string{"kube-rdma-status"}, http.StatusOK},
		{"valid for another", []string{"kube-rdma-status"}, []string{"https://kubernetes.default.svc"}, http.StatusUnauthorized},
		{"server answers no audiences", []string{"kube-rdma-status"}, nil, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newAPI()
			api.audiences = tc.got
			h := api.filter(Config{Audiences: tc.want}).Wrap(okHandler)
			if code, body := get(t, h, http.MethodGet, "/metrics", "Bearer prom-token"); code != tc.wantCode {
				t.Errorf("got %d %q, want %d", code, body, tc.wantCode)
			}
		})
	}
}

type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// TestFilterCaches: a scraper every 15 s costs one TokenReview and one
// SubjectAccessReview per AllowTTL; a refusal is reused for DenyTTL; a
// failed call is not cached at all.
func TestFilterCaches(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	api := newAPI()
	h := api.filter(Config{Clock: clock}).Wrap(okHandler)
	step := func(d time.Duration, authz string, wantCode int, wantCalls [2]int) {
		t.Helper()
		clock.now = clock.now.Add(d)
		if code, body := get(t, h, http.MethodGet, "/metrics", authz); code != wantCode {
			t.Errorf("%s: %d %q, want %d", authz, code, body, wantCode)
		}
		if diff := cmp.Diff(wantCalls, api.calls()); diff != "" {
			t.Errorf("%s: API calls [TokenReviews SARs] (-want +got):\n%s", authz, diff)
		}
	}
	step(0, "Bearer prom-token", 200, [2]int{1, 1})
	for range 7 { // 7 x 15 s = 105 s < 2 min
		step(15*time.Second, "Bearer prom-token", 200, [2]int{1, 1})
	}
	step(16*time.Second, "Bearer prom-token", 200, [2]int{2, 2}) // 121 s: both expired
	// Refusals: for DenyTTL (10 s).
	step(0, "Bearer garbage", 401, [2]int{3, 2})
	step(9*time.Second, "Bearer garbage", 401, [2]int{3, 2})
	step(2*time.Second, "Bearer garbage", 401, [2]int{4, 2})
	step(0, "Bearer other-token", 403, [2]int{5, 3})
	step(9*time.Second, "Bearer other-token", 403, [2]int{5, 3})
	// A binding made meanwhile counts once the refusal expires.
	api.mu.Lock()
	api.allowed["system:serviceaccount:default:other"] = []string{"/metrics"}
	api.mu.Unlock()
	step(0, "Bearer other-token", 403, [2]int{5, 3})
	step(2*time.Second, "Bearer other-token", 200, [2]int{5, 4}) // the token's answer (2 min) still held
	// The API server failing: 500, fail closed, and asked again next time.
	api.mu.Lock()
	api.fail = errors.New("connection refused")
	api.mu.Unlock()
	step(0, "Bearer new-token", 500, [2]int{6, 4})
	step(0, "Bearer new-token", 500, [2]int{7, 4})
}

// TestFilterCacheBounded: the caches hold CacheSize entries; the least
// recently used goes first.
func TestFilterCacheBounded(t *testing.T) {
	api := newAPI()
	api.users["third-token"] = api.users["prom-token"]
	h := api.filter(Config{CacheSize: 2}).Wrap(okHandler)
	for _, tok := range []string{"prom-token", "other-token", "third-token"} {
		get(t, h, http.MethodGet, "/metrics", "Bearer "+tok)
	}
	before := api.calls()
	get(t, h, http.MethodGet, "/metrics", "Bearer third-token") // still cached
	if got := api.calls(); got[0] != before[0] {
		t.Errorf("the newest token was asked about again: calls %v -> %v", before, got)
	}
	get(t, h, http.MethodGet, "/metrics", "Bearer prom-token") // evicted
	if got := api.calls(); got[0] != before[0]+1 {
		t.Errorf("the evicted token was not asked about again: calls %v -> %v", before, got)
	}
}
