package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"strings"
	"testing"

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

func TestDispatchErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"discover", "-o", "yaml"}, `output format "yaml"`},
		{[]string{"discover", "extra"}, "takes no arguments"},
		{[]string{"discover", "--sample", "nope"}, `unknown sample node "nope"`},
		{[]string{"discover", "--sysfs-root", "/nonexistent"}, `"/nonexistent" is not a sysfs tree`},
		{[]string{"demo", "--sample", "nope"}, `unknown sample node "nope"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := dispatch(context.Background(), tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := dispatch(context.Background(), []string{"help"}, &out, &errOut); err != nil || !strings.Contains(out.String(), "discover") {
		t.Errorf("help: %v, %q", err, out.String())
	}
	for _, cmd := range []string{"discover", "demo", "run"} {
		out.Reset()
		errOut.Reset()
		err := dispatch(context.Background(), []string{cmd, "-h"}, &out, &errOut)
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(errOut.String(), "usage: device-plugin "+cmd) {
			t.Errorf("%s -h: %v, %q", cmd, err, errOut.String())
		}
	}
}
