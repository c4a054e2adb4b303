package kubectlrdma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// run runs args against f and returns stdout, stderr and the exit status.
func run(f *fakeCluster, args ...string) (string, string, int) {
	return runWith(f.newCluster, args...)
}

func runWith(newCluster func(genericclioptions.RESTClientGetter) (Cluster, error), args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), args, Options{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		NewCluster: newCluster,
		NewExecer:  containers.newExecer,
		Now:        func() time.Time { return now },
	})
	return out.String(), errOut.String(), code
}

// Bad input ends with one line on stderr and a non-zero exit, never a trace.
func TestBadInput(t *testing.T) {
	w := newWorld(t)
	future := w.states[0].DeepCopy()
	future.Name, future.Status.StateVersion = "future-1", 99
	newer := &world{states: append(append(w.states[:0:0], w.states...), *future), nodes: append(w.nodes, node("future-1", nil)), pods: w.pods}
	forbidden := fmt.Errorf("%w: list rdmanodestates: rdmanodestates.rdma.kube-rdma.io is forbidden: User \"nobody\" cannot list", ErrForbidden)
	tests := []struct {
		name    string
		f       *fakeCluster
		args    []string
		code    int
		wantErr string
		usage   bool
	}{
		{"no CRD nodes", &fakeCluster{w: w, noCRD: true}, []string{"nodes"}, 1, "the RDMANodeState CRD is not installed: install the kube-rdma chart", false},
		{"no CRD topo", &fakeCluster{w: w, noCRD: true}, []string{"topo", "hgx-1"}, 1, "the RDMANodeState CRD is not installed", false},
		{"no CRD pods", &fakeCluster{w: w, noCRD: true}, []string{"pods", "-A"}, 1, "the RDMANodeState CRD is not installed", false},
		{"no CRD doctor", &fakeCluster{w: w, noCRD: true}, []string{"doctor", "node/hgx-1"}, 1, "the RDMANodeState CRD is not installed", false},
		{"forbidden", &fakeCluster{w: w, err: forbidden}, []string{"nodes"}, 1, "permission denied: list rdmanodestates", false},
		{"newer topo", &fakeCluster{w: newer}, []string{"topo", "future-1"}, 1,
			"written by a newer daemon (state version 99, this kubectl-rdma reads up to 1): upgrade kubectl-rdma", false},
		{"newer nodes", &fakeCluster{w: newer}, []string{"nodes"}, 1, "written by a newer daemon (state version 99", false},
		{"newer pods", &fakeCluster{w: newer}, []string{"pods", "-A"}, 1, "written by a newer daemon (state version 99", false},
		{"unknown command", &fakeCluster{w: w}, []string{"nope"}, 2, `unknown command "nope"`, true},
		{"unknown flag", &fakeCluster{w: w}, []string{"nodes", "--bogus"}, 2, "unknown flag: --bogus", true},
		{"bad output", &fakeCluster{w: w}, []string{"nodes", "-o", "xml"}, 2, `output format "xml"`, true},
		{"wide topo", &fakeCluster{w: w}, []string{"topo", "hgx-1", "-o", "wide"}, 2, `output format "wide"`, true},
		{"nodes arg", &fakeCluster{w: w}, []string{"nodes", "x"}, 2, `nodes takes no arguments, got ["x"]`, true},
		{"topo nothing", &fakeCluster{w: w}, []string{"topo"}, 2, "topo takes one NODE (or -f FILE)", true},
		{"topo both", &fakeCluster{w: w}, []string{"topo", "x", "-f", "y"}, 2, "topo takes no arguments", true},
		{"doctor kind", &fakeCluster{w: w}, []string{"doctor", "svc/x"}, 2, `doctor: "svc/x": want POD, pod/POD or node/NODE`, true},
		{"doctor empty", &fakeCluster{w: w}, []string{"doctor", "node/"}, 2, `names no object`, true},
		{"version arg", &fakeCluster{w: w}, []string{"version", "x"}, 2, "version takes no arguments", true},
		{"missing file", &fakeCluster{w: w}, []string{"topo", "-f", "/nonexistent.json"}, 1, "read discovery report: open /nonexistent.json", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(tt.f, tt.args...)
			lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
			last := lines[len(lines)-1]
			if code != tt.code || !strings.HasPrefix(last, "kubectl-rdma: ") || !strings.Contains(last, tt.wantErr) {
				t.Errorf("exit %d, stderr %q; want exit %d and a last line with %q", code, errOut, tt.code, tt.wantErr)
			}
			if strings.Contains(errOut, "goroutine ") || strings.Contains(errOut, ".go:") {
				t.Errorf("stderr has a trace:\n%s", errOut)
			}
			if tt.usage != strings.HasPrefix(errOut, "usage: kubectl rdma") || !tt.usage && len(lines) != 1 {
				t.Errorf("stderr %q: want the usage line first only for a usage error, else one line", errOut)
			}
			if tt.code == 2 && out != "" {
				t.Errorf("stdout %q on a usage error", out)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	f := &fakeCluster{w: &world{}}
	for _, args := range [][]string{nil, {"--help"}, {"-h"}, {"help"}, {"nodes", "--help"}, {"topo", "-h"}, {"pods", "--help"},
		{"doctor", "--help"}, {"version", "--help"}, {"help", "doctor"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			out, errOut, code := run(f, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "Examples:") || !strings.Contains(out, "kubectl rdma") {
				t.Errorf("exit %d, stderr %q, stdout:\n%s\nwant exit 0 and help with examples", code, errOut, out)
			}
		})
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, errOut, code := run(f, args...)
		if code != 0 || errOut != "" || !strings.HasPrefix(out, "kubectl-rdma ") || !strings.Contains(out, "commit ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// The real Cluster maps a missing kubeconfig to one line, exit 1.
func TestNoKubeconfig(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), []string{"nodes", "--kubeconfig", "/nonexistent/kubeconfig"},
		Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}})
	if code != 1 || !strings.Contains(errOut.String(), "/nonexistent/kubeconfig") || strings.Count(errOut.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

func TestOneLine(t *testing.T) {
	err := oneLine(fmt.Errorf("exec: %w", errors.New("first\nsecond\n")))
	if err.Error() != "exec: first second" {
		t.Errorf("%q", err)
	}
}
