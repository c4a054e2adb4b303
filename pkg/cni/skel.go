package cni

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Versions are the CNI spec versions the plugin speaks. 0.3.0 and 0.3.1 are
// what Flannel's and Cilium's conflists still declare: chained into one, the
// plugin must speak the list's version (results in 0.3.x form; no CHECK, which
// the spec added in 0.4.0, and skel refuses it there).
var Versions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// Funcs adapts the handlers to skel: results are printed in the
// configuration's cniVersion, errors in the CNI error format.
func (p *Plugin) Funcs(ctx context.Context) skel.CNIFuncs {
	wrap := func(fn func(context.Context, *skel.CmdArgs) error) func(*skel.CmdArgs) error {
		return func(a *skel.CmdArgs) error {
			mark("skel")
			err := fn(ctx, a)
			mark("return")
			if err != nil {
				return Error(err)
			}
			return nil
		}
	}
	return skel.CNIFuncs{
		Add: func(a *skel.CmdArgs) error {
			mark("skel")
			res, err := p.Add(ctx, a)
			mark("return")
			if err != nil {
				return Error(err)
			}
			var v struct {
				CNIVersion string `json:"cniVersion"`
			}
			_ = json.Unmarshal(a.StdinData, &v) // Add parsed it already
			if err := types.PrintResult(res, v.CNIVersion); err != nil {
				return types.NewError(types.ErrIOFailure, "print result", err.Error())
			}
			mark("output")
			return nil
		},
		Del:    wrap(p.Del),
		Check:  wrap(p.Check),
		Status: wrap(p.Status),
		GC:     wrap(p.GC),
	}
}

// Main runs the command the runtime asked for (CNI_* environment, the
// configuration on stdin) with the plugin newPlugin builds, prints the
// result or the error on stdout and returns the exit status.
//
// The spec's error result carries cniVersion, which types.Error and skel
// leave out; skel also reads stdin itself, before the handlers, and fails
// some requests (bad environment, JSON or version) without them. So Main
// reads stdin first, hands skel the same bytes, and prints every error with
// the configuration's cniVersion when it is one the plugin speaks, else the
// latest it speaks.
//
// Once the plugin is built, the outcome of an ADD, DEL, CHECK, GC or STATUS
// (its pool, CNI error code and time) is appended to the node's operations
// spool for the daemon's metrics (recordOp, package cniops).
func Main(ctx context.Context, newPlugin func() (*Plugin, error), about string) int {
	defer writeTimings(os.Getenv("CNI_COMMAND"))
	start := time.Now()
	mark("main")
	stdin, err := io.ReadAll(os.Stdin)
	mark("stdin")
	ver := errorVersion(stdin)
	if err != nil {
		return printError(ver, types.NewError(types.ErrIOFailure, "read stdin", err.Error()))
	}
	p, err := newPlugin()
	if err != nil {
		return printError(ver, types.NewError(types.ErrInternal, "start kube-rdma", err.Error()))
	}
	mark("new")
	defer func() { _ = p.HostNS.Close() }()
	// skel reads os.Stdin and takes no reader: give it a pipe with the
	// bytes already read.
	r, w, err := os.Pipe()
	if err != nil {
		return printError(ver, types.NewError(types.ErrIOFailure, "pipe stdin", err.Error()))
	}
	go func() {
		// A failed write shows as a short stdin, which skel reports.
		_, _ = w.Write(stdin)
		_ = w.Close()
	}()
	os.Stdin = r
	defer func() { _ = r.Close() }()
	e := skel.PluginMainFuncsWithError(p.Funcs(ctx), Versions, about)
	p.recordOp(os.Getenv("CNI_COMMAND"), e, time.Since(start))
	if e != nil {
		return printError(ver, e)
	}
	return 0
}

// errorVersion is the cniVersion an error is printed with.
func errorVersion(stdin []byte) string {
	supported := Versions.SupportedVersions()
	var v struct {
		CNIVersion string `json:"cniVersion"`
	}
	if json.Unmarshal(stdin, &v) == nil && slices.Contains(supported, v.CNIVersion) {
		return v.CNIVersion
	}
	return supported[len(supported)-1]
}

// printError prints e as the spec's error result and returns the exit
// status: 1, or 2 when not even the error could be printed.
func printError(ver string, e *types.Error) int {
	out := struct {
		CNIVersion string `json:"cniVersion"`
		*types.Error
	}{ver, e}
	b, err := json.MarshalIndent(out, "", "    ")
	if err == nil {
		_, err = os.Stdout.Write(b)
	}
	if err != nil {
		return 2
	}
	return 1
}
