// Package reqcount counts the API requests a client makes for one
// resource, by verb, for tests and the scale harness that hold a component
// to the requests it may make. Never linked into shipped binaries.
package reqcount

import (
	"maps"
	"net/http"
	"strings"
	"sync"
)

// Counter counts the requests whose URL path names Resource (a plural
// resource, "resourceclaims") by verb: "LIST" and "GET" (a GET of the
// collection or of one object), "WATCH", else the HTTP method.
type Counter struct {
	Resource string

	mu sync.Mutex
	n  map[string]int
}

// Wrap is a rest.Config.Wrap function.
func (c *Counter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if verb, ok := c.verb(r); ok {
			c.mu.Lock()
			if c.n == nil {
				c.n = map[string]int{}
			}
			c.n[verb]++
			c.mu.Unlock()
		}
		return rt.RoundTrip(r)
	})
}

func (c *Counter) verb(r *http.Request) (string, bool) {
	seg := "/" + c.Resource
	i := strings.Index(r.URL.Path, seg)
	if i < 0 || (len(r.URL.Path) > i+len(seg) && r.URL.Path[i+len(seg)] != '/') {
		return "", false
	}
	if r.Method != http.MethodGet {
		return r.Method, true
	}
	switch {
	case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
		return "WATCH", true
	case strings.HasSuffix(r.URL.Path, seg):
		return "LIST", true
	default:
		return "GET", true
	}
}

// Counts returns a copy of the counts.
func (c *Counter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.n)
	if out == nil {
		out = map[string]int{}
	}
	return out
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
