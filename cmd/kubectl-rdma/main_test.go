package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func TestTopo(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.DGXH100())
	if err != nil {
		t.Fatal(err)
	}
	n, err := discovery.Scanner{SysRoot: tree.SysRoot, ProcRoot: tree.ProcRoot}.Scan()
	if err != nil {
		t.Fatal(err)
	}
	report, _ := json.Marshal(n)
	var out, errOut bytes.Buffer
	if err := run([]string{"topo"}, bytes.NewReader(report), &out, &errOut); err != nil {
		t.Fatalf("topo: %v (%s)", err, errOut.String())
	}
	// GPU0 (bus 1b) row: PXB to its own NIC mlx5_0, first column.
	var gpu0 string
	for line := range strings.Lines(out.String()) {
		if strings.HasPrefix(line, "GPU0 ") {
			gpu0 = line
		}
	}
	if f := strings.Fields(gpu0); len(f) < 2 || f[1] != "PXB" {
		t.Errorf("GPU0 row = %q, want PXB to mlx5_0 first", gpu0)
	}
	if !strings.Contains(out.String(), "mlx5_11") || !strings.Contains(out.String(), "ibp220s0") {
		t.Errorf("device table lacks mlx5_11/ibp220s0:\n%s", out.String())
	}
}

func TestTopoBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"not json":         "garbage",
		"unknown field":    `{"rdmaDevices":[],"gpus":[],"bogus":1}`,
		"not a report":     `{}`,
		"wrong field type": `{"rdmaDevices":[{"numaNode":"zero"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := run([]string{"topo"}, strings.NewReader(in), &out, &errOut); err == nil {
				t.Errorf("topo accepted %q:\n%s", in, out.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run([]string{"nope"}, nil, &out, &errOut); err == nil {
		t.Errorf("unknown command accepted")
	}
}
