package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// prometheusBinary is $E2E_PROMETHEUS, else prometheus on PATH (Debian's prometheus package);
// "" when neither.
func prometheusBinary() string {
	if p := os.Getenv("E2E_PROMETHEUS"); p != "" {
		return p
	}
	p, _ := exec.LookPath("prometheus")
	return p
}

// testPrometheusScrape: a real Prometheus, started on this node with a scrape config of the
// daemon's /metrics (daemonMetrics, the node's loopback), scrapes it (up == 1) and holds the
// CNI plugin's operations the daemon exported from its spool: the phase's pods were attached
// by the chained entry, so there are successful ADDs. Skips without a prometheus binary.
func testPrometheusScrape(t *testing.T, e *env) {
	bin := prometheusBinary()
	if bin == "" {
		t.Skip("no prometheus binary: apt-get install prometheus (Debian), or set E2E_PROMETHEUS")
	}
	if e.daemonMetrics == "" {
		t.Fatal("the phase gives no daemon /metrics URL")
	}
	target, err := url.Parse(e.daemonMetrics)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
- job_name: kube-rdma
  metrics_path: %s
  static_configs:
  - targets: [%q]
`, target.Path, target.Host)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		_ = logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	api := "http://" + addr
	for _, q := range []struct{ query, what string }{
		{`up{job="kube-rdma"}`, "the daemon scraped"},
		{`sum(kube_rdma_cni_operations_total{job="kube-rdma",command="ADD",code="0"})`, "successful CNI ADDs"},
	} {
		var v float64
		err := eventually(t.Context(), 25*time.Second, func(ctx context.Context) error {
			v, err = promQuery(ctx, api, q.query)
			if err == nil && v < 1 {
				err = fmt.Errorf("%s = %v", q.query, v)
			}
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", q.what, err)
		}
		t.Logf("%s = %v", q.query, v)
	}
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port no one listens on now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// promQuery runs an instant query on Prometheus's HTTP API and returns the value of its single
// sample.
func promQuery(ctx context.Context, api, query string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, fmt.Errorf("query %s: %w: %s", query, err, b)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("query %s: %s %s", query, r.Status, r.Error)
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples, want 1: %s", query, len(r.Data.Result), strings.TrimSpace(string(b)))
	}
	s, ok := r.Data.Result[0].Value[1].(string)
	if !ok {
		return 0, fmt.Errorf("query %s: value %v", query, r.Data.Result[0].Value)
	}
	return strconv.ParseFloat(s, 64)
}
