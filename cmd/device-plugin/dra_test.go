package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestDRAFlags: --dra refuses to start without what it needs, each with
// the reason; without --dra nothing is started.
func TestDRAFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, ""},
		{[]string{"--dra"}, "--dra needs the node's name"},
		{[]string{"--dra", "--node-name", "n", "--cdi-dir", ""}, "--dra needs --cdi-dir"},
		{[]string{"--dra", "--node-name", "n"}, "--dra: no --kubeconfig, and no in-cluster config"},
		{[]string{"--dra", "--node-name", "n", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, "--kubeconfig"},
	} {
		cfg, err := parseRunFlags(c.args, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		drv, err := startDRA(context.Background(), cfg, connect(cfg.kubeconfig, cfg.dra.enabled))
		switch {
		case c.want == "" && (err != nil || drv != nil):
			t.Errorf("%v: %v, front end %v", c.args, err, drv)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
		if drv != nil {
			drv.Stop()
		}
	}
}

// TestPodUID: --pod-uid defaults to $POD_UID (the chart's downward API env)
// and the flag wins over it.
func TestPodUID(t *testing.T) {
	t.Setenv("POD_UID", "from-env")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "from-env"},
		{[]string{"--pod-uid", "from-flag"}, "from-flag"},
		{[]string{"--pod-uid", ""}, ""},
	} {
		cfg, err := parseRunFlags(c.args, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if cfg.dra.podUID != c.want {
			t.Errorf("%v: pod uid %q, want %q", c.args, cfg.dra.podUID, c.want)
		}
	}
}
