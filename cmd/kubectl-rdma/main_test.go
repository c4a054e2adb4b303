package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain runs main when the test binary is re-executed as kubectl-rdma.
func TestMain(m *testing.M) {
	if os.Getenv("KUBECTL_RDMA_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// The process wiring: exit status 0, 1, 2 and where the output goes.
func TestProcess(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStdout string
		inStderr string
	}{
		{[]string{"version"}, 0, "kubectl-rdma ", ""},
		{[]string{"--help"}, 0, "kubectl rdma nodes", ""},
		{[]string{"nodes", "--kubeconfig", "/nonexistent/kubeconfig"}, 1, "", "kubectl-rdma: kubeconfig: "},
		{[]string{"nope"}, 2, "", `kubectl-rdma: unknown command "nope"`},
		{[]string{"topo", "-f", "/nonexistent.json"}, 1, "", "read discovery report: open /nonexistent.json"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cmd := exec.Command(os.Args[0], tt.args...)
			cmd.Env = append(os.Environ(), "KUBECTL_RDMA_TEST_MAIN=1")
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.code || !strings.Contains(out.String(), tt.inStdout) || !strings.Contains(errOut.String(), tt.inStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q, %q", code, out.String(), errOut.String(), tt.code, tt.inStdout, tt.inStderr)
			}
		})
	}
}
