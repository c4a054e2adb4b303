package cni

import (
	"context"
	"encoding/json"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// Versions are the CNI spec versions the plugin speaks.
var Versions = version.PluginSupports("0.4.0", "1.0.0", "1.1.0")

// Funcs adapts the handlers to skel: results are printed in the
// configuration's cniVersion, errors in the CNI error format.
func (p *Plugin) Funcs(ctx context.Context) skel.CNIFuncs {
	wrap := func(fn func(context.Context, *skel.CmdArgs) error) func(*skel.CmdArgs) error {
		return func(a *skel.CmdArgs) error {
			if err := fn(ctx, a); err != nil {
				return Error(err)
			}
			return nil
		}
	}
	return skel.CNIFuncs{
		Add: func(a *skel.CmdArgs) error {
			res, err := p.Add(ctx, a)
			if err != nil {
				return Error(err)
			}
			var v struct {
				CNIVersion string `json:"cniVersion"`
			}
			json.Unmarshal(a.StdinData, &v) // Add parsed it already
			if err := types.PrintResult(res, v.CNIVersion); err != nil {
				return types.NewError(types.ErrIOFailure, "print result", err.Error())
			}
			return nil
		},
		Del:    wrap(p.Del),
		Check:  wrap(p.Check),
		Status: wrap(p.Status),
		GC:     wrap(p.GC),
	}
}
