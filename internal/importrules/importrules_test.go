package importrules

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestModule checks this module's packages against Rules.
func TestModule(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go tool to list the module's packages")
	}
	cmd := exec.Command(goTool, "list", "-deps", "-json=ImportPath,Standard,Deps", "./...")
	cmd.Dir = "../.." // the module root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var pkgs []Package
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p Package
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	// The rules must have something to check: a module without the
	// contracts or the CNI would pass vacuously.
	for _, want := range []string{Module + "/pkg/hostapi/attachment", Module + "/pkg/hostapi/claimrecord", Module + "/pkg/hostapi/allocdir", Module + "/pkg/hostapi/nodepools", Module + "/pkg/hostapi/devinfo", Module + "/pkg/cni", Module + "/cmd/cni",
		Module + "/pkg/agent", Module + "/pkg/agent/config", Module + "/pkg/nri", Module + "/pkg/nodestate", Module + "/pkg/netdevwatch", Module + "/pkg/claimstatus",
		Module + "/cmd/device-plugin", Module + "/cmd/kubectl-rdma", Module + "/hack/ocibuild"} {
		if !strings.Contains(string(out), `"ImportPath": "`+want+`"`) {
			t.Errorf("go list does not list %s", want)
		}
	}
	for _, v := range Check(pkgs, Rules) {
		t.Error(v)
	}
}

// TestCheckFails: the checker reports a contract that links a module
// outside std and internal/, a CNI package that links a front end or the
// agent through another package, the agent linking a front end or an
// observer, and an observer linking a front end, and nothing else.
func TestCheckFails(t *testing.T) {
	m := Module
	pkgs := []Package{
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "golang.org/x/sys/unix"},
		{ImportPath: m + "/internal/atomicfile", Deps: []string{"fmt"}},
		{ImportPath: m + "/pkg/dra", Deps: []string{"fmt"}},
		{ImportPath: m + "/pkg/dranot", Deps: []string{"fmt"}},
		{ImportPath: m + "/pkg/helper", Deps: []string{m + "/pkg/dra", "fmt"}},
		{ImportPath: m + "/pkg/hostapi/good", Deps: []string{m + "/internal/atomicfile", "fmt"}},
		{ImportPath: m + "/pkg/hostapi/bad", Deps: []string{"fmt", "golang.org/x/sys/unix"}},
		{ImportPath: m + "/pkg/hostapi/unlisted", Deps: []string{"example.com/lib"}},
		{ImportPath: m + "/pkg/cni/x", Deps: []string{m + "/pkg/helper", m + "/pkg/dra", "fmt"}},
		{ImportPath: m + "/pkg/cni", Deps: []string{m + "/pkg/dranot", "fmt"}},
		{ImportPath: m + "/pkg/cniinstall", Deps: []string{m + "/pkg/dra"}}, // not under pkg/cni
		{ImportPath: m + "/cmd/cni", Deps: []string{m + "/pkg/nodewatch/sub"}},
		{ImportPath: m + "/pkg/cni/y", Deps: []string{m + "/pkg/agent/config"}},
		{ImportPath: m + "/pkg/agent", Deps: []string{m + "/pkg/agent/config", m + "/pkg/nodewatch", m + "/pkg/dra"}},
		{ImportPath: m + "/pkg/agent/config", Deps: []string{m + "/pkg/nri"}},
		{ImportPath: m + "/pkg/agentx", Deps: []string{m + "/pkg/deviceplugin"}}, // not under pkg/agent
		{ImportPath: m + "/pkg/nri", Deps: []string{m + "/pkg/agent", m + "/pkg/deviceplugin/sub"}},
		{ImportPath: m + "/pkg/nodestate", Deps: []string{m + "/pkg/agent", m + "/pkg/nodewatch", m + "/pkg/helper", m + "/pkg/dra"}},
		{ImportPath: m + "/pkg/deviceplugin", Deps: []string{m + "/pkg/agent", m + "/pkg/dra"}}, // a front end: no rule
		{ImportPath: m + "/cmd/kubectl-rdma", Deps: []string{"github.com/google/go-containerregistry/pkg/v1", "fmt"}},
		{ImportPath: m + "/cmd/device-plugin", Deps: []string{m + "/hack/ocibuild/x"}},
		{ImportPath: m + "/hack/ocibuild", Deps: []string{"github.com/google/go-containerregistry/pkg/v1"}}, // a build tool: no rule
	}
	want := []string{
		m + "/cmd/cni links " + m + "/pkg/nodewatch/sub, a front end or the agent (pkg/nodewatch) (rule: the CNI plugin links no front end and not the agent)",
		m + "/cmd/device-plugin links " + m + "/hack/ocibuild/x, build tooling (" + m + "/hack) (rule: shipped binaries link no build tooling)",
		m + "/cmd/kubectl-rdma links github.com/google/go-containerregistry/pkg/v1, build tooling (github.com/google/go-containerregistry) (rule: shipped binaries link no build tooling)",
		m + "/pkg/agent links " + m + "/pkg/dra, a front end or an observer of the agent (pkg/dra) (rule: the agent links no front end and no observer)",
		m + "/pkg/agent/config links " + m + "/pkg/nri, a front end or an observer of the agent (pkg/nri) (rule: the agent links no front end and no observer)",
		m + "/pkg/cni/x links " + m + "/pkg/dra, a front end or the agent (pkg/dra) (rule: the CNI plugin links no front end and not the agent)",
		m + "/pkg/cni/y links " + m + "/pkg/agent/config, a front end or the agent (pkg/agent) (rule: the CNI plugin links no front end and not the agent)",
		m + "/pkg/hostapi/bad links golang.org/x/sys/unix, neither the standard library nor internal/ (rule: contracts link std and internal/ only)",
		m + "/pkg/hostapi/unlisted links example.com/lib, neither the standard library nor internal/ (rule: contracts link std and internal/ only)",
		m + "/pkg/nodestate links " + m + "/pkg/dra, a front end (pkg/dra) (rule: the agent's observers link no front end)",
		m + "/pkg/nri links " + m + "/pkg/deviceplugin/sub, a front end (pkg/deviceplugin) (rule: the agent's observers link no front end)",
	}
	if diff := cmp.Diff(want, Check(pkgs, Rules)); diff != "" {
		t.Errorf("Check (-want +got)\n%s", diff)
	}
}
