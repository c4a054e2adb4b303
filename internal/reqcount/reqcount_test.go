package reqcount

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCounter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	c := &Counter{Resource: "resourceclaims"}
	client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims"},
		{http.MethodGet, "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims?watch=true&fieldSelector=x"},
		{http.MethodGet, "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c1"},
		{http.MethodPatch, "/apis/resource.k8s.io/v1/namespaces/a/resourceclaims/c1/status"},
		{http.MethodGet, "/apis/resource.k8s.io/v1/resourceclaimtemplates"},
		{http.MethodGet, "/api/v1/pods"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if diff := cmp.Diff(map[string]int{"LIST": 1, "WATCH": 1, "GET": 1, "PATCH": 1}, c.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
}
