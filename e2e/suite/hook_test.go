package suite

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// runHook runs `$E2E_NODE_HOOK verb args...` and returns its stdout.
func runHook(ctx context.Context, hook string, verb string, args ...string) (string, error) {
	return runHookOn(ctx, hook, "", verb, args...)
}

// runHookOn runs the hook with NODE=node in its environment (unless node is ""): a harness
// with several nodes (kind-rxe) picks the node by it.
func runHookOn(ctx context.Context, hook, node, verb string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, hook, append([]string{verb}, args...)...)
	if node != "" {
		cmd.Env = append(os.Environ(), "NODE="+node)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("node hook %s %s: %w: %s", verb, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// lines splits a hook's output into its non-empty lines, sorted.
func lines(out string) []string {
	var l []string
	for s := range strings.SplitSeq(out, "\n") {
		if s = strings.TrimSpace(s); s != "" {
			l = append(l, s)
		}
	}
	slices.Sort(l)
	return l
}

// hookLines runs a listing verb (links, records, leases) with a deadline.
func (e *env) hookLines(ctx context.Context, verb string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := runHook(ctx, e.hook, verb)
	return lines(out), err
}

// mustHook runs a verb and fails t on error.
func (e *env) mustHook(t *testing.T, timeout time.Duration, verb string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := runHook(ctx, e.hook, verb, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeListing is what the node shows through the listing verbs.
type nodeListing map[string][]string

var listingVerbs = []string{"links", "records", "leases"}

// listing takes links, records and leases.
func (e *env) listing(ctx context.Context) (nodeListing, error) {
	l := nodeListing{}
	for _, verb := range listingVerbs {
		got, err := e.hookLines(ctx, verb)
		if err != nil {
			return nil, err
		}
		l[verb] = got
	}
	return l, nil
}

// minus returns the names of a that are not in b (both sorted or not).
func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// sameLines compares two node-state texts line by line, ignoring trailing
// white space and trailing empty lines, and returns a diff (-want +got) or "".
func sameLines(want, got string) string {
	norm := func(s string) []string {
		var l []string
		for line := range strings.SplitSeq(s, "\n") {
			l = append(l, strings.TrimRight(line, " \t\r"))
		}
		for len(l) > 0 && l[len(l)-1] == "" {
			l = l[:len(l)-1]
		}
		return l
	}
	return cmp.Diff(norm(want), norm(got))
}

// TestHookRunner runs a fake hook: output parsing and failure reporting.
func TestHookRunner(t *testing.T) {
	hook := filepath.Join(t.TempDir(), "hook")
	script := `#!/bin/sh
case "$1" in
links) printf 'lo\n  eth0 \n\nens1f0v0\n' ;;
port-state) echo "$2 $3 $4" ;;
*) echo "unknown verb $1" >&2; exit 3 ;;
esac
`
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := &env{config: config{hook: hook}}
	got, err := e.hookLines(t.Context(), "links")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"ens1f0v0", "eth0", "lo"}, got); diff != "" {
		t.Errorf("links (-want +got):\n%s", diff)
	}
	if out := e.mustHook(t, 5*time.Second, "port-state", "mlx5_0", "1", "down"); out != "mlx5_0 1 down\n" {
		t.Errorf("port-state args: %q", out)
	}
	_, err = runHook(t.Context(), hook, "bogus")
	if err == nil || !strings.Contains(err.Error(), "unknown verb bogus") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("failing verb: %v; want the exit status and stderr", err)
	}
	if d := minus([]string{"a", "b", "c"}, []string{"b", "x"}); !slices.Equal(d, []string{"a", "c"}) {
		t.Errorf("minus = %v", d)
	}
	if d := sameLines("a\nb\n", "a \nb"); d != "" {
		t.Errorf("sameLines: %s", d)
	}
	if d := sameLines("a\nb\n", "a\nc\n"); d == "" {
		t.Error("sameLines: no diff for different lines")
	}
}
