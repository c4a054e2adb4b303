package statusauth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
)

// TokenReviewer is what the filter needs of the API server to authenticate:
// kubernetes.Interface's AuthenticationV1().TokenReviews().
type TokenReviewer interface {
	Create(ctx context.Context, tr *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// AccessReviewer is what the filter needs of the API server to authorize:
// kubernetes.Interface's AuthorizationV1().SubjectAccessReviews().
type AccessReviewer interface {
	Create(ctx context.Context, sar *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
}

// Defaults of Config.
const (
	DefaultAllowTTL  = 2 * time.Minute
	DefaultDenyTTL   = 10 * time.Second
	DefaultCacheSize = 1024
	DefaultTimeout   = 10 * time.Second
)

// Config of a Filter. Tokens and Access are required.
type Config struct {
	Tokens TokenReviewer
	Access AccessReviewer
	// Audiences the token must be valid for; empty: the API server's own
	// (a pod's default ServiceAccount token).
	Audiences []string
	// AllowTTL and DenyTTL: how long an authenticated or allowed, and an
	// unauthenticated or denied, answer is reused; 0 means the defaults.
	AllowTTL, DenyTTL time.Duration
	// CacheSize bounds each cache (tokens, access decisions); 0 means
	// DefaultCacheSize.
	CacheSize int
	// Timeout bounds each API call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Clock is the caches' clock; nil means the real one.
	Clock cache.Clock
	// Logger gets refusals (debug) and failed API calls (warn); nil
	// discards.
	Logger *slog.Logger
}

// Filter authenticates and authorizes requests through the API server.
type Filter struct {
	cfg    Config
	tokens *cache.LRUExpireCache // sha256(token) -> authnResult
	access *cache.LRUExpireCache // sha256(user, verb, path) -> bool
}

type authnResult struct {
	ok   bool
	user authnv1.UserInfo
}

// New returns a Filter with cfg's zero fields set to their defaults.
func New(cfg Config) *Filter {
	if cfg.AllowTTL <= 0 {
		cfg.AllowTTL = DefaultAllowTTL
	}
	if cfg.DenyTTL <= 0 {
		cfg.DenyTTL = DefaultDenyTTL
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Filter{
		cfg:    cfg,
		tokens: cache.NewLRUExpireCacheWithClock(cfg.CacheSize, cfg.Clock),
		access: cache.NewLRUExpireCacheWithClock(cfg.CacheSize, cfg.Clock),
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Wrap returns h behind the filter: h only sees GET and HEAD requests whose
// bearer token the API server authenticates and whose user may get the
// request's path.
func (f *Filter) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			unauthorized(w)
			return
		}
		user, ok, err := f.authenticate(r.Context(), token)
		if err != nil {
			f.cfg.Logger.Warn("status endpoint: TokenReview failed", "path", r.URL.Path, "err", err)
			http.Error(w, "authentication check failed", http.StatusInternalServerError)
			return
		}
		if !ok {
			f.cfg.Logger.Debug("status endpoint: token not authenticated", "path", r.URL.Path, "remote", r.RemoteAddr)
			unauthorized(w)
			return
		}
		allowed, err := f.authorize(r.Context(), user, r.URL.Path)
		if err != nil {
			f.cfg.Logger.Warn("status endpoint: SubjectAccessReview failed", "path", r.URL.Path, "user", user.Username, "err", err)
			http.Error(w, "authorization check failed", http.StatusInternalServerError)
			return
		}
		if !allowed {
			f.cfg.Logger.Debug("status endpoint: forbidden", "path", r.URL.Path, "user", user.Username)
			http.Error(w, fmt.Sprintf("forbidden: user %q may not get %s", user.Username, r.URL.Path), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="kube-rdma"`)
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// bearerToken is the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive, RFC 6750).
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate asks the API server (or the cache) who token is. An error
// is the API call's; it is not cached.
func (f *Filter) authenticate(ctx context.Context, token string) (authnv1.UserInfo, bool, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := f.tokens.Get(key); ok {
		res := v.(authnResult)
		return res.user, res.ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	tr, err := f.cfg.Tokens.Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: f.cfg.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return authnv1.UserInfo{}, false, fmt.Errorf("create TokenReview: %w", err)
	}
	res := authnResult{ok: tr.Status.Authenticated && f.audienceOK(tr.Status.Audiences), user: tr.Status.User}
	ttl := f.cfg.AllowTTL
	if !res.ok {
		res.user, ttl = authnv1.UserInfo{}, f.cfg.DenyTTL
	}
	f.tokens.Add(key, res, ttl)
	return res.user, res.ok, nil
}

// audienceOK: with audiences asked for, the API server must have found the
// token valid for one of them (as k8s.io/apiserver's webhook authenticator
// checks); an API server that ignores spec.audiences answers none.
func (f *Filter) audienceOK(got []string) bool {
	if len(f.cfg.Audiences) == 0 {
		return true
	}
	return slices.ContainsFunc(got, func(a string) bool { return slices.Contains(f.cfg.Audiences, a) })
}

// accessKey is what an access decision depends on.
type accessKey struct {
	User   string              `json:"u"`
	UID    string              `json:"i"`
	Groups []string            `json:"g"`
	Extra  map[string][]string `json:"e"`
	Path   string              `json:"p"`
}

// authorize asks the API server (or the cache) whether user may get path.
func (f *Filter) authorize(ctx context.Context, user authnv1.UserInfo, path string) (bool, error) {
	extra := make(map[string][]string, len(user.Extra))
	sarExtra := make(map[string]authzv1.ExtraValue, len(user.Extra))
	for k, v := range user.Extra {
		extra[k], sarExtra[k] = v, authzv1.ExtraValue(v)
	}
	// encoding/json sorts map keys: equal users give equal keys.
	b, err := json.Marshal(accessKey{User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra, Path: path})
	if err != nil {
		return false, fmt.Errorf("access cache key: %w", err)
	}
	key := sha256.Sum256(b)
	if v, ok := f.access.Get(key); ok {
		return v.(bool), nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	sar, err := f.cfg.Access.Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: sarExtra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("create SubjectAccessReview: %w", err)
	}
	allowed := sar.Status.Allowed && !sar.Status.Denied
	ttl := f.cfg.AllowTTL
	if !allowed {
		ttl = f.cfg.DenyTTL
	}
	f.access.Add(key, allowed, ttl)
	return allowed, nil
}
