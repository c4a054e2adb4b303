package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// binaryCommand is the plugin binary (this test binary as main) with args,
// its environment without any inherited CNI_*.
func binaryCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CNI_") }), "KUBE_RDMA_AS_PLUGIN=1")
	return cmd
}

// runBinary runs the plugin binary with args, env and stdin.
func runBinary(t *testing.T, args, env []string, stdin string) (stdout, stderr string, exit int) {
	t.Helper()
	cmd := binaryCommand(args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run plugin: %v", err)
	}
	return out.String(), errb.String(), exit
}

// Run by hand, the binary answers help and version; with CNI_COMMAND it is
// a CNI plugin, whatever its arguments.
func TestCommandLine(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		exit     int
		inStdout string // "" for an empty stdout
		inStderr string
	}{
		{name: "help", args: []string{"--help"}, inStdout: "\n  version "},
		{name: "-h", args: []string{"-h"}, inStdout: "CNI_COMMAND"},
		{name: "help word", args: []string{"help"}, inStdout: "CNI spec versions: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"},
		{name: "version", args: []string{"--version"}, inStdout: "CNI spec versions: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"},
		{name: "version word", args: []string{"version"}, inStdout: "kube-rdma "},
		{name: "extra argument", args: []string{"--help", "x"}, exit: 2, inStderr: "--help takes no arguments"},
		{name: "unknown", args: []string{"ADD"}, exit: 2, inStderr: `unknown command "ADD"`},
		{name: "unknown flag", args: []string{"--bogus"}, exit: 2, inStderr: "usage: kube-rdma"},
		{name: "help lists install", args: []string{"-h"}, inStdout: "\n  install "},
		{name: "install -h", args: []string{"install", "-h"}, inStdout: "-remove-on-exit"},
		{name: "install, nothing to do", args: []string{"install"}, exit: 2, inStderr: "kube-rdma: install: nothing to install"},
		{name: "install, stray argument", args: []string{"install", "x"}, exit: 2, inStderr: `install takes no arguments, got ["x"]`},
		{name: "install, bad log format", args: []string{"install", "--bin-dir=/x", "--log-format=xml"}, exit: 2, inStderr: "--log-format"},
		{name: "CNI VERSION", env: []string{"CNI_COMMAND=VERSION"}, inStdout: `"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`},
		{name: "CNI VERSION ignores arguments", args: []string{"--help"}, env: []string{"CNI_COMMAND=VERSION"},
			inStdout: `"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`},
		{name: "bare", inStderr: "CNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, exit := runBinary(t, tt.args, tt.env, `{"cniVersion":"1.1.0"}`)
			if exit != tt.exit || !strings.Contains(out, tt.inStdout) || tt.inStdout == "" && out != "" || !strings.Contains(errOut, tt.inStderr) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, %q on stdout, %q on stderr", exit, out, errOut, tt.exit, tt.inStdout, tt.inStderr)
			}
		})
	}
}
