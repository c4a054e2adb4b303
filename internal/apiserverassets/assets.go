// Package apiserverassets finds kube-apiserver and etcd for the tests that run against a real
// API server (controller-runtime's envtest), the same way in every package: KUBEBUILDER_ASSETS
// when it is set (a directory without both binaries fails the test: the run asked for them),
// else the directory e2e/local-node/build.sh builds them into (without them the test skips and
// says how to get them). KUBE_RDMA_TEST_APISERVER=off skips those tests with its reason. It is
// imported only from _test.go files.
package apiserverassets

import (
	"os"
	"path/filepath"
	"testing"
)

// Default is where e2e/local-node/build.sh puts kube-apiserver and etcd.
const Default = "/var/cache/kube-rdma-e2e/bin/current"

// OffEnv, set to "off", skips every test against a real API server; hack/test-as-user.sh in CI
// sets it, because those tests ran as root already and start the same binaries as any user.
const OffEnv = "KUBE_RDMA_TEST_APISERVER"

// Dir returns the directory of kube-apiserver and etcd, or ends t as the package doc says.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := find(os.LookupEnv, os.Stat)
	switch {
	case err == nil:
		return dir
	case err.skip:
		t.Skip(err.msg)
	default:
		t.Fatal(err.msg)
	}
	return ""
}

type findErr struct {
	msg  string
	skip bool
}

func find(lookup func(string) (string, bool), stat func(string) (os.FileInfo, error)) (string, *findErr) {
	if v, _ := lookup(OffEnv); v == "off" {
		return "", &findErr{msg: OffEnv + "=off: the tests against a real API server are skipped in this run", skip: true}
	}
	dir, set := lookup("KUBEBUILDER_ASSETS")
	if !set || dir == "" {
		dir, set = Default, false
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := stat(filepath.Join(dir, bin)); err != nil {
			if set {
				return "", &findErr{msg: "KUBEBUILDER_ASSETS=" + dir + " has no " + bin + ": " + err.Error()}
			}
			return "", &findErr{msg: "needs a real API server: no " + bin + " in " + dir +
				" (set KUBEBUILDER_ASSETS, or e2e/local-node/build.sh builds it there)", skip: true}
		}
	}
	return dir, nil
}
