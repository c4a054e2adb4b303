package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

func TestDiscoverSampleJSON(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := dispatch(context.Background(), []string{"discover", "--sample", "dgx", "-o", "json"}, &out, &errOut); err != nil {
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

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"discover", "-o", "yaml"}, `output format "yaml"`},
		{[]string{"discover", "extra"}, `discover takes no arguments, got ["extra"]`},
		{[]string{"discover", "--sample", "nope"}, `unknown sample node "nope"`},
		{[]string{"--sample", "nope"}, `unknown sample node "nope"`},
		{[]string{"run", "--sample", "dgx", "extra"}, `run takes no arguments, got ["extra"]`},
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"--help", "x"}, `--help takes no arguments`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := dispatch(context.Background(), tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, cli.ErrUsage) {
				t.Errorf("error = %v, want a usage error containing %q", err, tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout %q, want nothing", out.String())
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var out, errOut bytes.Buffer
		if err := dispatch(context.Background(), args, &out, &errOut); err != nil || errOut.Len() != 0 {
			t.Errorf("%v: %v, stderr %q", args, err, errOut.String())
		}
		for _, want := range []string{"\n  run ", "\n  discover ", "\n  version ", "\n  help ", "dgx"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%v lacks %q:\n%s", args, want, out.String())
			}
		}
	}
	for _, cmd := range []string{"discover", "run"} {
		var out, errOut bytes.Buffer
		err := dispatch(context.Background(), []string{cmd, "--help"}, &out, &errOut)
		if !errors.Is(err, flag.ErrHelp) || errOut.Len() != 0 || !strings.Contains(out.String(), "-sample") {
			t.Errorf("%s --help: %v, stdout %q, stderr %q", cmd, err, out.String(), errOut.String())
		}
		for line := range strings.Lines(out.String()) {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s --help: doubled default: %q", cmd, line)
			}
		}
	}
	var out bytes.Buffer
	if err := dispatch(context.Background(), []string{"--version"}, &out, &out); err != nil || !strings.HasPrefix(out.String(), "kube-rdma-demo ") {
		t.Errorf("--version: %v, %q", err, out.String())
	}
}
