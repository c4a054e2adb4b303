package kubectlrdma

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the output")

// goldenCase is one command line and the golden file of its transcript.
type goldenCase struct {
	golden string
	args   []string
}

// goldenCases run against the fake cluster and, in envtest_test.go, against
// a real API server with the same objects: both must match one file.
var goldenCases = []goldenCase{
	{"nodes", []string{"nodes"}},
	{"nodes-wide", []string{"nodes", "-o", "wide"}},
	{"topo-hgx", []string{"topo", "hgx-1"}},
	{"topo-local", []string{"topo", "gpu-a"}},
	{"topo-soft", []string{"topo", "soft-1"}},
	{"topo-no-daemon", []string{"topo", "cpu-1"}},
	{"topo-unknown-node", []string{"topo", "nope-1"}},
	{"pods-train", []string{"pods", "-n", "train"}},
	{"pods-all", []string{"pods", "-A"}},
	{"pods-all-wide", []string{"pods", "-A", "-o", "wide"}},
	{"pods-empty-ns", []string{"pods", "-n", "kube-system"}},
	{"pods-train-json", []string{"pods", "-n", "train", "-o", "json"}},
	{"doctor-worker-0", []string{"doctor", "-n", "train", "worker-0"}},
	{"doctor-worker-1", []string{"doctor", "-n", "train", "pod/worker-1"}},
	{"doctor-worker-0-no-exec", []string{"doctor", "-n", "train", "worker-0", "--no-exec"}},
	{"doctor-worker-2-no-exec-permission", []string{"doctor", "-n", "train", "worker-2"}},
	{"doctor-rxe-client", []string{"doctor", "-n", "default", "rxe-client"}},
	{"doctor-vf-0", []string{"doctor", "-n", "train", "vf-0"}},
	{"doctor-pending", []string{"doctor", "-n", "train", "pending-0"}},
	{"doctor-dra-0", []string{"doctor", "-n", "train", "dra-0"}},
	{"doctor-other-claim", []string{"doctor", "-n", "train", "other-claim", "--no-exec"}},
	{"doctor-lost", []string{"doctor", "-n", "default", "lost"}},
	{"doctor-web", []string{"doctor", "-n", "default", "web"}},
	{"doctor-node-hgx", []string{"doctor", "node/hgx-1"}},
	{"doctor-node-soft", []string{"doctor", "node/soft-1"}},
	{"doctor-node-cpu", []string{"doctor", "node/cpu-1"}},
	{"doctor-unknown-pod", []string{"doctor", "-n", "train", "nope"}},
	{"doctor-unknown-node", []string{"doctor", "node/nope-1"}},
	{"bw-ib", []string{"bw", "-n", "train", "worker-0", "worker-1"}},
	{"bw-exec-forbidden", []string{"bw", "-n", "train", "worker-2", "worker-1"}},
	{"bw-no-perftest", []string{"bw", "-n", "default", "rxe-client", "rxe-client"}},
	{"bw-not-allocated", []string{"bw", "-n", "default", "rxe-client", "lost"}},
	{"bw-no-rdma", []string{"bw", "-n", "default", "rxe-client", "web"}},
	{"bw-pending", []string{"bw", "-n", "train", "worker-0", "pending-0"}},
}

// transcript runs args and returns what a terminal would show: the command,
// stdout, stderr and the exit status.
func transcript(newCluster func(genericclioptions.RESTClientGetter) (Cluster, error), args []string) string {
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), args, Options{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		NewCluster: newCluster,
		NewExecer:  containers.newExecer,
		Now:        func() time.Time { return now },
	})
	return fmt.Sprintf("$ kubectl rdma %s\n%s--- stderr\n%s--- exit %d\n", strings.Join(args, " "), out.String(), errOut.String(), code)
}

// checkGolden compares got with testdata/NAME.golden (-update rewrites it).
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

func TestGolden(t *testing.T) {
	f := &fakeCluster{w: newWorld(t)}
	for _, tc := range goldenCases {
		t.Run(tc.golden, func(t *testing.T) {
			checkGolden(t, tc.golden, transcript(f.newCluster, tc.args))
		})
	}
}
