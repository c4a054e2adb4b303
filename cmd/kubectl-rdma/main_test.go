package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/cli"

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

// openPTY returns the terminal end of a new pseudo-terminal.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pty's terminal end: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// On a terminal, topo without -f says what it wants instead of waiting.
func TestTopoRefusesTerminal(t *testing.T) {
	tty := openPTY(t)
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() { done <- run([]string{"topo"}, tty, &out, &errOut) }()
	select {
	case err := <-done:
		if !errors.Is(err, errTerminal) || cli.Exit("kubectl-rdma", err, &bytes.Buffer{}) == 0 {
			t.Errorf("topo on a terminal: %v, want %v and a non-zero exit", err, errTerminal)
		}
		if !strings.Contains(err.Error(), "-f FILE") || !strings.Contains(err.Error(), "device-plugin discover -o json") {
			t.Errorf("error %q does not say what topo expects", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("topo is waiting for input on a terminal")
	}
	// A file that is not a terminal is read as before.
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := run([]string{"topo"}, f, &out, &errOut); err == nil || errors.Is(err, errTerminal) {
		t.Errorf("topo on /dev/null: %v, want a decode error", err)
	}
}

func TestCommandLine(t *testing.T) {
	tests := []struct {
		args     []string
		wantErr  string // "" for success
		usage    bool   // a usage error: exit 2
		inStdout string
	}{
		{args: nil, inStdout: "\n  topo "},
		{args: []string{"help"}, inStdout: "\n  version "},
		{args: []string{"-h"}, inStdout: "\n  topo "},
		{args: []string{"--help"}, inStdout: "\n  help "},
		{args: []string{"topo", "-h"}, inStdout: "usage: kubectl rdma topo"},
		{args: []string{"version"}, inStdout: "kubectl-rdma "},
		{args: []string{"--version"}, inStdout: "commit "},
		{args: []string{"topo", "node.json"}, wantErr: `topo takes no arguments, got ["node.json"]`, usage: true},
		{args: []string{"topo", "-x"}, wantErr: "flag provided but not defined: -x", usage: true},
		{args: []string{"nope"}, wantErr: `unknown command "nope"`, usage: true},
		{args: []string{"-f", "node.json"}, wantErr: `unknown flag "-f": flags follow the command`, usage: true},
		{args: []string{"version", "x"}, wantErr: "version takes no arguments", usage: true},
		{args: []string{"topo", "-f", "/nonexistent.json"}, wantErr: "read discovery report: open /nonexistent.json"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(tt.args, strings.NewReader(""), &out, &errOut)
			code := cli.Exit("kubectl-rdma", err, &bytes.Buffer{})
			if tt.wantErr == "" {
				if code != 0 || !strings.Contains(out.String(), tt.inStdout) || errOut.Len() != 0 {
					t.Errorf("exit %d (%v), stdout %q, stderr %q; want exit 0 and %q on stdout", code, err, out.String(), errOut.String(), tt.inStdout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || out.Len() != 0 {
				t.Errorf("error %v, stdout %q; want an error containing %q and nothing on stdout", err, out.String(), tt.wantErr)
			}
			if want := map[bool]int{true: 2, false: 1}[tt.usage]; code != want {
				t.Errorf("exit %d, want %d", code, want)
			}
			if tt.usage && !strings.Contains(errOut.String(), "usage: kubectl rdma") {
				t.Errorf("stderr %q lacks the usage", errOut.String())
			}
		})
	}
}
