package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

func insecureTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // the run's own API server on 127.0.0.1
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

// writes scrapes the API server's apiserver_request_total and sums the
// writes by resource (with "/subresource").
func (cp *controlPlane) writes(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.apiURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+cp.token)
	resp, err := (&http.Client{Transport: insecureTransport(), Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, val, _ := strings.Cut(strings.TrimPrefix(line, "apiserver_request_total{"), "} ")
		l := parseLabels(labels)
		if !writeVerbs[l["verb"]] {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		key := l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out, sc.Err()
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			out[k] = strings.Trim(v, `"`)
		}
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// etcdBytes sums the stored value sizes under prefix, by a classifier of
// the key, through etcd's gRPC gateway (POST /v3/kv/range).
func (cp *controlPlane) etcdBytes(ctx context.Context, prefix string, class func(key string) string) (map[string]int, map[string]int, error) {
	sizes, counts := map[string]int{}, map[string]int{}
	end := []byte(prefix)
	end[len(end)-1]++
	key := []byte(prefix)
	for {
		body, _ := json.Marshal(map[string]any{"key": base64.StdEncoding.EncodeToString(key),
			"range_end": base64.StdEncoding.EncodeToString(end), "limit": 500})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.etcdURL+"/v3/kv/range", bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, nil, fmt.Errorf("etcd range %s: %w", prefix, err)
		}
		var r struct {
			Kvs []struct {
				Key   []byte `json:"key"`
				Value []byte `json:"value"`
			} `json:"kvs"`
			More bool `json:"more"`
		}
		err = json.NewDecoder(resp.Body).Decode(&r)
		_ = resp.Body.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("etcd range %s: %w", prefix, err)
		}
		for _, kv := range r.Kvs {
			c := class(string(kv.Key))
			sizes[c] += len(kv.Key) + len(kv.Value)
			counts[c]++
		}
		if !r.More || len(r.Kvs) == 0 {
			return sizes, counts, nil
		}
		key = append(slices.Clone(r.Kvs[len(r.Kvs)-1].Key), 0)
	}
}

// Timing is one command's median wall time and largest RSS over its runs.
type Timing struct {
	Command string  `json:"command"`
	WallS   float64 `json:"wallS"`
	RSSMiB  float64 `json:"rssMiB"`
	Lines   int     `json:"lines"`
}

// timeCommands runs each command runs times, interleaved, and keeps each
// one's median wall time and its largest max RSS. GNU time measures the
// RSS: a child this process starts directly would report this process's
// own peak (Go starts children with vfork, and Linux carries the parent's
// high-water mark into the child's ru_maxrss at exec).
func timeCommands(ctx context.Context, kubeconfig string, runs int, cmds [][]string) ([]Timing, error) {
	walls := make([][]float64, len(cmds))
	out := make([]Timing, len(cmds))
	rss, err := os.CreateTemp("", "scale-rss-")
	if err != nil {
		return nil, fmt.Errorf("rss file: %w", err)
	}
	_ = rss.Close()
	defer func() { _ = os.Remove(rss.Name()) }()
	for range runs {
		for i, argv := range cmds {
			cmd := exec.CommandContext(ctx, "/usr/bin/time", append([]string{"-f", "%M", "-o", rss.Name()}, argv...)...)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
			var stdout countWriter
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return nil, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, stderr.String())
			}
			walls[i] = append(walls[i], time.Since(start).Seconds())
			b, err := os.ReadFile(rss.Name())
			if err != nil {
				return nil, fmt.Errorf("rss of %s: %w", argv[0], err)
			}
			kb, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
			if err != nil {
				return nil, fmt.Errorf("rss of %s: %q: %w", argv[0], b, err)
			}
			out[i].Command = strings.Join(argv[1:], " ")
			out[i].RSSMiB = max(out[i].RSSMiB, kb/1024)
			out[i].Lines = stdout.lines
		}
	}
	for i := range out {
		out[i].WallS = quantile(walls[i], 0.5)
	}
	return out, nil
}

type countWriter struct{ lines int }

func (w *countWriter) Write(p []byte) (int, error) {
	w.lines += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

var _ io.Writer = (*countWriter)(nil)

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)-1) + 0.5)
	return s[i]
}

// storm flaps port 1 of the first DRA device on share of the nodes once a
// second for d: the publisher and the slice pacer of each node see each
// flap as the node watcher's poll would report it. It returns the nodes
// that flapped and the flaps made.
func (c *cluster) storm(ctx context.Context, share float64, d time.Duration) (nodes, flaps int, err error) {
	var set []*simNode
	for _, i := range rand.Perm(len(c.nodes)) {
		if len(set) >= max(1, int(share*float64(len(c.nodes)))) {
			break
		}
		set = append(set, c.nodes[i])
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); {
		select {
		case <-ctx.Done():
			return len(set), flaps, ctx.Err()
		case <-tick.C:
		}
		for _, n := range set {
			n.flap(n.topo.draMembers[0].Name)
			if n.health()[n.topo.draMembers[0].Name] {
				n.pacer.Kick()
			} else {
				n.pacer.Urgent() // as dra.Driver.Publish asks for a newly tainted device
			}
		}
		flaps += len(set)
	}
	// Leave every port up again.
	for _, n := range set {
		if !n.health()[n.topo.draMembers[0].Name] {
			n.flap(n.topo.draMembers[0].Name)
			n.pacer.Kick()
		}
	}
	return len(set), flaps, nil
}
