package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShippedBinariesLinkNoScaffolding keeps the test and demo scaffolding
// out of the binaries the image ships: the sysfs tree writer, the kubelet
// stand-in, the demo script and the test helpers belong to tests and to
// kube-rdma-demo only; the fake RDMA netlink to the local-node e2e's build
// (tag kuberdma_e2e), which this default build must not link; and nothing
// under e2e/ (the fake GPU drivers, the fixture writer).
func TestShippedBinariesLinkNoScaffolding(t *testing.T) {
	shipped := []string{"./cmd/device-plugin", "./cmd/cni", "./cmd/kubectl-rdma"}
	forbidden := []string{"/nodesim", "/kubeletstub", "/deviceplugin/demo", "/podrestest", "/netnstest", "/agenttest", "/fakerdma", "/e2e/"}
	cmd := exec.Command("go", append([]string{"list", "-deps"}, shipped...)...)
	cmd.Dir = "../.." // the module root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for pkg := range strings.Lines(string(out)) {
		pkg = strings.TrimSpace(pkg)
		if !strings.HasPrefix(pkg, "github.com/kube-rdma/kube-rdma/") {
			continue
		}
		for _, f := range forbidden {
			if strings.Contains(pkg, f) {
				t.Errorf("a shipped binary (%s) links %s", strings.Join(shipped, ", "), pkg)
			}
		}
	}
}
