package kubectlrdma

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// runIn runs args with stdin in and no cluster.
func runIn(in io.Reader, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), args, Options{Streams: genericiooptions.IOStreams{In: in, Out: &out, ErrOut: &errOut}})
	return out.String(), errOut.String(), code
}

// topo -f reads a discovery report from a file or standard input, with no
// cluster: what `kubectl rdma topo -f` did before the node state existed.
func TestTopoFile(t *testing.T) {
	report, err := json.Marshal(scan(t, nodesim.DGXH100()))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "node.json")
	if err := os.WriteFile(file, report, 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, errOut, code := runIn(strings.NewReader(""), "topo", "-f", file)
	if code != 0 || errOut != "" {
		t.Fatalf("topo -f: exit %d: %s", code, errOut)
	}
	fromStdin, _, _ := runIn(bytes.NewReader(report), "topo", "-f", "-")
	if fromStdin != fromFile {
		t.Errorf("topo -f - differs from topo -f FILE:\n%s\n%s", fromStdin, fromFile)
	}
	// GPU0 (bus 1b) row: PXB to its own NIC mlx5_0, first column.
	var gpu0 string
	for line := range strings.Lines(fromFile) {
		if strings.HasPrefix(line, "GPU0 ") {
			gpu0 = line
		}
	}
	if f := strings.Fields(gpu0); len(f) < 2 || f[1] != "PXB" {
		t.Errorf("GPU0 row = %q, want PXB to mlx5_0 first", gpu0)
	}
	for _, want := range []string{"mlx5_11", "ibp220s0", "CHAR DEVICES", "uverbs", "PCIE ROOT", "Legend:"} {
		if !strings.Contains(fromFile, want) {
			t.Errorf("topo -f lacks %q:\n%s", want, fromFile)
		}
	}
	out, _, code := runIn(strings.NewReader(""), "topo", "-f", file, "-o", "json")
	if code != 0 || !json.Valid([]byte(out)) || !strings.Contains(out, `"rdmaDevices"`) {
		t.Errorf("topo -f -o json: exit %d:\n%s", code, out)
	}
}

func TestTopoFileBadInput(t *testing.T) {
	for name, in := range map[string]string{
		"not json":         "garbage",
		"unknown field":    `{"rdmaDevices":[],"gpus":[],"bogus":1}`,
		"not a report":     `{}`,
		"wrong field type": `{"rdmaDevices":[{"numaNode":"zero"}]}`,
		"empty":            "",
	} {
		t.Run(name, func(t *testing.T) {
			out, errOut, code := runIn(strings.NewReader(in), "topo", "-f", "-")
			if code != 1 || out != "" || !strings.HasPrefix(errOut, "kubectl-rdma: read discovery report -: ") || strings.Count(errOut, "\n") != 1 {
				t.Errorf("topo accepted %q or said it badly: exit %d, stdout %q, stderr %q", in, code, out, errOut)
			}
		})
	}
}

// openPTY returns the terminal end of a new pseudo-terminal.
func openPTY(t *testing.T) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
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
	t.Cleanup(func() { _ = tty.Close() })
	return tty
}

// On a terminal, topo -f - says what it wants instead of waiting; colour is
// on only for a terminal.
func TestTerminal(t *testing.T) {
	tty := openPTY(t)
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() {
		var o Options
		o.Streams = genericiooptions.IOStreams{In: tty, Out: &out, ErrOut: &errOut}
		o.NewCluster = NewCluster
		root := NewRootCommand(&o)
		root.SetArgs([]string{"topo", "-f", "-"})
		done <- root.Execute()
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTerminal) {
			t.Errorf("topo -f - on a terminal: %v, want %v", err, ErrTerminal)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("topo is waiting for input on a terminal")
	}
	t.Setenv("NO_COLOR", "")
	if !IsTerminal(tty) || IsTerminal(&out) {
		t.Errorf("IsTerminal: tty %v, buffer %v", IsTerminal(tty), IsTerminal(&out))
	}
	t.Setenv("NO_COLOR", "1")
	if IsTerminal(tty) {
		t.Error("IsTerminal with NO_COLOR set")
	}
}

func TestDoctorColor(t *testing.T) {
	var b bytes.Buffer
	writeChecks(&b, &DoctorReport{Target: "node/x", Checks: []Check{{Name: "a", Verdict: Fail, Detail: "d", Fix: "f"}}}, true)
	if !strings.Contains(b.String(), "\x1b[31mFAIL\x1b[0m  a: d\n      fix: f\n") {
		t.Errorf("coloured doctor output %q", b.String())
	}
}
