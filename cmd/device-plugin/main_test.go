package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestDiscoverJSON(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := dispatch(context.Background(), []string{"discover", "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot, "-o", "json"}, &out, &errOut); err != nil {
		t.Fatalf("discover: %v (%s)", err, errOut.String())
	}
	var n discovery.Node
	if err := json.Unmarshal(out.Bytes(), &n); err != nil {
		t.Fatalf("discover -o json printed no JSON: %v\n%s", err, out.String())
	}
	if len(n.RDMADevices) != 12 || len(n.GPUs) != 8 || len(n.Affinity) != 96 {
		t.Errorf("got %d devices, %d GPUs, %d affinity entries; want 12, 8, 96", len(n.RDMADevices), len(n.GPUs), len(n.Affinity))
	}
}

// Every bad command line is a usage error (exit 2) with nothing on stdout;
// a bad flag or argument also prints the usage on stderr (a bad flag value
// is named in the error alone).
func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args  []string
		want  string // in the error
		value bool   // a bad flag value: no usage
	}{
		{[]string{"discover", "-o", "yaml"}, `output format "yaml"`, true},
		{[]string{"discover", "extra"}, `discover takes no arguments, got ["extra"]`, false},
		{[]string{"discover", "--sample", "dgx"}, "flag provided but not defined: -sample", false},
		{[]string{"run", "extra"}, `run takes no arguments, got ["extra"]`, false},
		{[]string{"--kubelet-dir", "/x", "extra"}, `run takes no arguments, got ["extra"]`, false},
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus", false},
		{[]string{"run", "--health-interval", "2s"}, "--health-interval 2s must be in (0, 1s]", true},
		{[]string{"run", "--cni-shared-netdev", "veth"}, `--cni-shared-netdev "veth" is not macvlan, ipvlan or none`, true},
		{[]string{"run", "--log-level", "loud"}, "--log-level", true},
		{[]string{"run", "--cni-reclaim-state-dir", "/x", "--cni-reclaim-interval", "0s"}, "--cni-reclaim-interval 0s must be positive", true},
		{[]string{"run", "--cni-reclaim-state-dir", "/x", "--cni-bin-dir", ""}, "--cni-reclaim-state-dir needs --cni-bin-dir", true},
		{[]string{"probe"}, "want a check first, ready or live", false},
		{[]string{"probe", "started"}, `unknown check "started", want ready or live`, false},
		{[]string{"probe", "ready", "extra"}, `probe takes no arguments, got ["extra"]`, false},
		{[]string{"probe", "live", "--bogus"}, "flag provided but not defined: -bogus", false},
		{[]string{"demo"}, `unknown command "demo"`, false},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`, false},
		{[]string{"help", "run"}, `help takes no arguments`, false},
		{[]string{"version", "x"}, `version takes no arguments`, false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := dispatch(context.Background(), tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
			if code := cli.Exit("device-plugin", err, &bytes.Buffer{}); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if out.Len() != 0 || tt.value == strings.Contains(errOut.String(), "usage: device-plugin") {
				t.Errorf("stdout %q, stderr %q: want the usage on stderr only for a bad flag or argument", out.String(), errOut.String())
			}
		})
	}
}

func TestDiscoverBadRoot(t *testing.T) {
	var out, errOut bytes.Buffer
	err := dispatch(context.Background(), []string{"discover", "--sysfs-root", "/nonexistent"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), `"/nonexistent" is not a sysfs tree`) || errors.Is(err, cli.ErrUsage) {
		t.Errorf("error = %v, want a runtime error naming the root", err)
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var out, errOut bytes.Buffer
		err := dispatch(context.Background(), args, &out, &errOut)
		if err != nil || errOut.Len() != 0 {
			t.Errorf("%v: %v, stderr %q", args, err, errOut.String())
		}
		for _, cmd := range []string{"run", "discover", "probe", "version", "help"} {
			if !strings.Contains(out.String(), "\n  "+cmd+" ") {
				t.Errorf("%v does not list %s:\n%s", args, cmd, out.String())
			}
		}
	}
	for _, cmd := range []string{"discover", "run", "probe"} {
		var out, errOut bytes.Buffer
		err := dispatch(context.Background(), []string{cmd, "-h"}, &out, &errOut)
		if !errors.Is(err, flag.ErrHelp) || cli.Exit("device-plugin", err, &errOut) != 0 || errOut.Len() != 0 ||
			!strings.Contains(out.String(), "usage: device-plugin "+cmd) {
			t.Errorf("%s -h: %v, stdout %q, stderr %q", cmd, err, out.String(), errOut.String())
		}
		// No default is printed twice ("(default ...) (default ...)").
		for line := range strings.Lines(out.String()) {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s -h: doubled default: %q", cmd, line)
			}
		}
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errOut bytes.Buffer
		if err := dispatch(context.Background(), args, &out, &errOut); err != nil || !strings.HasPrefix(out.String(), "device-plugin ") ||
			!strings.Contains(out.String(), "commit ") || !strings.Contains(out.String(), "built ") {
			t.Errorf("%v: %v, %q", args, err, out.String())
		}
	}
}

func TestRunFlags(t *testing.T) {
	t.Setenv("NODE_NAME", "node-7")
	cfg, err := parseRunFlags([]string{"--health-interval", "250ms"}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "node-7" || cfg.HealthInterval.String() != "250ms" || cfg.plugin.KubeletDir != "/var/lib/kubelet/device-plugins" ||
		cfg.AllocDir != "/var/run/kube-rdma/alloc" || cfg.plugin.AllocDir != cfg.AllocDir {
		t.Errorf("config = %+v", cfg)
	}
	cfg, err = parseRunFlags([]string{"--node-name", "n1", "--alloc-dir", ""}, &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil || cfg.NodeName != "n1" || cfg.AllocDir != "" || cfg.plugin.AllocDir != "" {
		t.Errorf("--node-name n1 --alloc-dir '': %v, %q, %q", err, cfg.NodeName, cfg.AllocDir)
	}
}

func TestLoggerDurations(t *testing.T) {
	var b bytes.Buffer
	newLogger(&b, slog.LevelInfo).Info("reload", "took", 1500*time.Millisecond)
	if !strings.Contains(b.String(), `"took":"1.5s"`) {
		t.Errorf("log line %s, want the duration as 1.5s", b.String())
	}
}
