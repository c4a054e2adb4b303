// Package importrules states which of kube-rdma's packages may link which,
// and checks a module's package list against it (its test runs the check
// on this module with `go list -deps -json`):
//
//   - the on-disk contracts (pkg/hostapi/...) link the standard library and
//     internal/ only, so either side of a contract can read it without the
//     other's dependencies;
//   - the CNI plugin (pkg/cni/..., cmd/cni), exec'd for every ADD and DEL,
//     links no front end of the agent and not the agent itself
//     (pkg/agent/..., pkg/deviceplugin/..., pkg/dra/..., pkg/nri/...,
//     pkg/nodestate/..., pkg/netdevwatch/..., pkg/claimstatus/...,
//     pkg/nodewatch/..., nor the daemon's collector of its operations,
//     pkg/cnimetrics/...): it talks to them through pkg/hostapi only;
//   - the agent (pkg/agent/...) links no front end and no observer
//     (pkg/deviceplugin/..., pkg/dra/..., pkg/nri/..., pkg/nodestate/...,
//     pkg/netdevwatch/..., pkg/claimstatus/...): they import it, and
//     cmd/device-plugin wires them in;
//   - the agent's observers (pkg/nri/..., pkg/nodestate/...,
//     pkg/netdevwatch/..., pkg/claimstatus/...) link no front
//     end (pkg/deviceplugin/..., pkg/dra/...): they read the agent's view;
//   - the shipped binaries (cmd/device-plugin, cmd/cni, cmd/kubectl-rdma)
//     link no build tooling: nothing under hack/, not go-containerregistry
//     nor cyclonedx-go (hack/ocibuild's, in the same go.mod).
//
// Only what a package links counts: `go list -deps` leaves out its
// _test.go files, so an external test package may run the agent with a
// front end.
//
// It runs nothing itself and imports the standard library only.
package importrules

import (
	"fmt"
	"slices"
	"strings"
)

// Module is kube-rdma's module path.
const Module = "github.com/kube-rdma/kube-rdma"

// Package is one entry of `go list -deps -json`: the fields the rules use.
type Package struct {
	ImportPath string
	Standard   bool
	Deps       []string // every package it links, transitively
}

// Rule forbids the packages under From to link what Forbids reports.
type Rule struct {
	Name string
	// From are import paths: a package is under one when it is the path
	// or below it.
	From []string
	// Forbids reports why dep may not be linked, "" when it may.
	Forbids func(dep Package) string
}

// Rules are kube-rdma's.
var Rules = []Rule{
	{
		Name: "contracts link std and internal/ only",
		From: []string{Module + "/pkg/hostapi"},
		Forbids: func(dep Package) string {
			if dep.Standard || under(dep.ImportPath, Module+"/internal") {
				return ""
			}
			return "neither the standard library nor internal/"
		},
	},
	{
		Name: "the CNI plugin links no front end and not the agent",
		From: []string{Module + "/pkg/cni", Module + "/cmd/cni"},
		Forbids: func(dep Package) string {
			return linksAny(dep, "a front end or the agent", "agent", "deviceplugin", "dra", "nri", "nodestate", "netdevwatch", "claimstatus", "nodewatch", "cnimetrics")
		},
	},
	{
		Name: "the agent links no front end and no observer",
		From: []string{Module + "/pkg/agent"},
		Forbids: func(dep Package) string {
			return linksAny(dep, "a front end or an observer of the agent", "deviceplugin", "dra", "nri", "nodestate", "netdevwatch", "claimstatus")
		},
	},
	{
		Name: "the agent's observers link no front end",
		From: []string{Module + "/pkg/nri", Module + "/pkg/nodestate", Module + "/pkg/netdevwatch", Module + "/pkg/claimstatus"},
		Forbids: func(dep Package) string {
			return linksAny(dep, "a front end", "deviceplugin", "dra")
		},
	},
	{
		Name: "shipped binaries link no build tooling",
		From: []string{Module + "/cmd/device-plugin", Module + "/cmd/cni", Module + "/cmd/kubectl-rdma"},
		Forbids: func(dep Package) string {
			for _, p := range releaseTooling {
				if under(dep.ImportPath, p) {
					return "build tooling (" + p + ")"
				}
			}
			return ""
		},
	},
}

// releaseTooling are the import paths only build tools may link.
var releaseTooling = []string{Module + "/hack", "github.com/google/go-containerregistry", "github.com/CycloneDX/cyclonedx-go"}

// linksAny says why dep may not be linked when it is one of the packages
// pkg/<name> or below them: what, and the package; "" when it is none.
func linksAny(dep Package, what string, names ...string) string {
	for _, p := range names {
		if under(dep.ImportPath, Module+"/pkg/"+p) {
			return what + " (pkg/" + p + ")"
		}
	}
	return ""
}

// Check returns one line per package of pkgs that links a dependency a
// rule forbids, sorted. A dependency not in pkgs counts as not standard.
func Check(pkgs []Package, rules []Rule) []string {
	byPath := make(map[string]Package, len(pkgs))
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !slices.ContainsFunc(r.From, func(f string) bool { return under(p.ImportPath, f) }) {
				continue
			}
			for _, d := range p.Deps {
				dep, ok := byPath[d]
				if !ok {
					dep = Package{ImportPath: d}
				}
				if why := r.Forbids(dep); why != "" {
					out = append(out, fmt.Sprintf("%s links %s, %s (rule: %s)", p.ImportPath, d, why, r.Name))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// under reports whether path is root or a package below it.
func under(path, root string) bool {
	return path == root || strings.HasPrefix(path, root+"/")
}
