// Package statusauth owns who may read the daemon's status endpoints
// (/metrics, /state) when they are reachable from the network: an
// http.Handler filter that authenticates the bearer token with a TokenReview
// (authentication.k8s.io/v1) and authorizes the request with a
// SubjectAccessReview (authorization.k8s.io/v1) for the non-resource URL
// (verb get, the request's path), as kube-rbac-proxy and controller-runtime's
// metrics filters do, and the rule that decides when the filter applies
// (Mode: auto is on for every address that is not the loopback).
//
// Answers: 401 without a bearer token or with one the API server does not
// authenticate (or not for the configured audiences), 403 when the user may
// not get the path, 405 for a method other than GET or HEAD, 500 when the API
// server could not be asked (fail closed, nothing cached). Decisions are
// cached by the SHA-256 of the token and of the user and path, in bounded
// LRU caches: allowed and authenticated for AllowTTL (2 minutes by default),
// denied and unauthenticated for DenyTTL (10 seconds), so a scraper that
// comes every 15 seconds costs one TokenReview and one SubjectAccessReview
// per 2 minutes, and a revoked token or binding stops working within 2
// minutes.
//
// It must not: log or keep a token (only its hash), build its own
// connection to the API server (the daemon's typed clientset is passed in
// as the two small interfaces below), or guard /healthz (the kubelet's
// probes carry no token).
//
// Why not controller-runtime's pkg/metrics/filters: it builds on
// k8s.io/apiserver's delegating authenticator and authorizer, which link the
// apiserver's option, egress-selector and OpenTelemetry packages. Linked
// into bin/device-plugin (release flags, `make build`) it took the binary
// from 34.2 MB to 41.0 MB (+6.8 MB, 327 more packages), over the 40 MB limit
// (docs/weight.md); this package is two typed API calls and a cache.
package statusauth
