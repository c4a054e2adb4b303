package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`

func TestNodeStateFlags(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a cluster, whatever runs the test
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		nodeEnv string
		publish bool
		err     string // part of the error; "" for none
	}{
		{name: "outside a cluster: off", args: nil},
		{name: "off", args: []string{"--node-state=false", "--kubeconfig", kc}},
		{name: "on without a cluster", args: []string{"--node-state"}, err: "--node-state: no --kubeconfig, and no in-cluster config"},
		{name: "kubeconfig", args: []string{"--kubeconfig", kc, "--node-name", "n1"}, publish: true},
		{name: "kubeconfig from NODE_NAME", args: []string{"--kubeconfig", kc}, nodeEnv: "n2", publish: true},
		{name: "no node name", args: []string{"--kubeconfig", kc}, err: "--node-name or NODE_NAME"},
		{name: "bad kubeconfig", args: []string{"--kubeconfig", kc + ".missing", "--node-name", "n1"}, err: "--kubeconfig"},
		{name: "bad interval", args: []string{"--kubeconfig", kc, "--node-name", "n1", "--node-state-interval", "0s"}, err: "--node-state-interval"},
		{name: "bad refresh", args: []string{"--kubeconfig", kc, "--node-name", "n1", "--node-state-refresh", "-1s"}, err: "--node-state-refresh -1s: want a duration >= 0"},
		{name: "refresh off", args: []string{"--kubeconfig", kc, "--node-name", "n1", "--node-state-refresh", "0"}, publish: true},
		{name: "bad cni mode", args: []string{"--kubeconfig", kc, "--node-name", "n1", "--cni-mode", "weird"}, err: "--cni-mode \"weird\""},
		{name: "chained pool without chained mode", args: []string{"--kubeconfig", kc, "--node-name", "n1", "--cni-mode", "multus", "--cni-chained-pool", "ib"},
			err: "--cni-chained-pool \"ib\" needs --cni-mode=chained"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NODE_NAME", tt.nodeEnv)
			args := append([]string{"--kubelet-dir", t.TempDir(), "--metrics-addr", "", "--cdi-dir", ""}, tt.args...)
			cfg, err := parseRunFlags(args, &bytes.Buffer{}, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			d, _, err := newAgent(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			wait, err := startNodeState(ctx, cfg, connect(cfg.kubeconfig, cfg.nodeState.wanted()), d, nil, nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one about %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cancel()
			wait()
			r, ok := d.State().NodeState.(nodestate.Report)
			if !ok || r.Enabled != tt.publish || (!tt.publish && r.Reason == "") {
				t.Errorf("/state nodeState %#v, want enabled %v (with a reason when off)", d.State().NodeState, tt.publish)
			}
		})
	}
}
