package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/statusauth"
)

// statusAuthFlags are the `run` flags of who may read /metrics and /state
// (pkg/statusauth).
type statusAuthFlags struct {
	modeFlag  string
	audiences string
	mode      statusauth.Mode
}

func (f *statusAuthFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.modeFlag, "metrics-auth", string(statusauth.Auto), "who may read /metrics and /state (never /healthz): on: a bearer token the API server authenticates (TokenReview) of a user allowed to get the path (SubjectAccessReview on nonResourceURLs, e.g. the chart's metrics-reader ClusterRole); off: whoever reaches --metrics-addr; auto: on unless --metrics-addr is the loopback. On needs the API server (--kubeconfig or the in-cluster config, and create on tokenreviews and subjectaccessreviews): without it the daemon does not start")
	fs.StringVar(&f.audiences, "metrics-auth-audiences", "", "comma-separated audiences a scraper's token must be valid for (with --metrics-auth on); empty: the API server's own")
}

// parse checks --metrics-auth.
func (f *statusAuthFlags) parse() error {
	m, err := statusauth.ParseMode(f.modeFlag)
	if err != nil {
		return cli.Usagef("run: --metrics-auth: %w", err)
	}
	f.mode = m
	return nil
}

// required reports whether the status server on addr ("" : none) needs
// authentication.
func (f *statusAuthFlags) required(addr string) bool {
	return addr != "" && f.mode.Required(addr)
}

// setStatusAuth sets cfg.StatusAuth when the status endpoints need
// authentication, from the daemon's one API connection; without one it
// refuses to start rather than serve them unauthenticated.
func setStatusAuth(cfg *runConfig, a apiConn) error {
	addr := cfg.MetricsAddr
	if !cfg.statusAuth.required(addr) {
		if addr != "" && !statusauth.Loopback(addr) {
			cfg.Logger.Warn("/metrics and /state are served without authentication to whoever reaches the address (--metrics-auth=off)", "addr", addr)
		}
		return nil
	}
	if a.err != nil {
		return fmt.Errorf("run: --metrics-auth=%s: /metrics and /state on %s need the API server to check scrapers' tokens (TokenReview, SubjectAccessReview), and there is none: %w", cfg.statusAuth.mode, addr, a.err)
	}
	var auds []string
	for _, s := range strings.Split(cfg.statusAuth.audiences, ",") {
		if s = strings.TrimSpace(s); s != "" {
			auds = append(auds, s)
		}
	}
	kube := a.clients.kube
	cfg.StatusAuth = statusauth.New(statusauth.Config{
		Tokens:    kube.AuthenticationV1().TokenReviews(),
		Access:    kube.AuthorizationV1().SubjectAccessReviews(),
		Audiences: auds,
		Logger:    cfg.Logger,
	}).Wrap
	cfg.Logger.Info("/metrics and /state need a bearer token allowed to get them (TokenReview, SubjectAccessReview)", "addr", addr, "audiences", auds)
	return nil
}
