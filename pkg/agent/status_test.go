package agent_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// TestStatusAuthWraps: Config.StatusAuth guards /metrics and /state, and
// not /healthz, which the kubelet's probes reach without a token.
func TestStatusAuthWraps(t *testing.T) {
	guard := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer ok" {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	e := start(t, nodesim.PortDown(), func(c *agenttest.Config) { c.StatusAuth = guard })
	got := map[string][2]int{}
	for _, path := range []string{"/metrics", "/state", "/healthz"} {
		var codes [2]int
		for i, authz := range []string{"", "Bearer ok"} {
			req, err := http.NewRequest(http.MethodGet, "http://"+e.Agent.MetricsAddr()+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if authz != "" {
				req.Header.Set("Authorization", authz)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		}
		got[path] = codes
	}
	want := map[string][2]int{"/metrics": {401, 200}, "/state": {401, 200}, "/healthz": {200, 200}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status codes [no token, token] (-want +got):\n%s", diff)
	}
}
