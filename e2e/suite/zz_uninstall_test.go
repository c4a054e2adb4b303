package suite

// This file's name sorts last: go test runs files in name order and tests in
// source order, and the uninstall must come after every test that needs the
// chart.

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// waitNodeStateIs waits up to a minute until `hook node-state` prints want;
// on timeout it returns the last difference (-want +now).
func (e *env) waitNodeStateIs(ctx context.Context, want string) (string, error) {
	var diff string
	err := eventually(ctx, time.Minute, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		now, err := runHook(ctx, e.hook, "node-state")
		if err != nil {
			return err
		}
		if diff = sameLines(want, now); diff != "" {
			return fmt.Errorf("node state differs")
		}
		return nil
	})
	return diff, err
}

// TestUninstall (E2E_UNINSTALL=1): helm uninstall leaves the node as it was
// before helm install, by `hook node-state` (E2E_NODE_STATE_BEFORE).
func TestUninstall(t *testing.T) {
	e := need(t)
	if !e.uninstall {
		t.Skip("E2E_UNINSTALL=1 not set")
	}
	e.needHelm(t)
	e.needHook(t)
	if e.stateBefore == "" {
		t.Skip("E2E_NODE_STATE_BEFORE unset: nothing to compare the node with")
	}
	before, err := os.ReadFile(e.stateBefore)
	if err != nil {
		t.Fatalf("E2E_NODE_STATE_BEFORE: %v", err)
	}
	if _, err := e.runHelm(t.Context(), "uninstall", e.helm.release, "--wait", "--timeout", rollout.String()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if diff, err := e.waitNodeStateIs(t.Context(), string(before)); err != nil {
		t.Fatalf("after helm uninstall: %v; node-state (-before helm install +now):\n%s", err, diff)
	}
	line := fmt.Sprintf("helm uninstall left nothing: hook node-state (%d lines: CNI binary, CNI configs, CDI specs, sockets) equal to before helm install %s after it returned",
		strings.Count(string(before), "\n"), time.Since(start).Round(time.Millisecond))
	t.Log(line)
	e.appendReport(t, line)
}
