package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// ErrOverlap is returned by Assign when one device matches two exclusive pools.
var ErrOverlap = errors.New("device matches more than one exclusive pool")

func (s Selectors) normalized() Selectors {
	low := func(in []string, f func(string) string) []string {
		if len(in) == 0 {
			return nil
		}
		out := make([]string, len(in))
		for i, v := range in {
			out[i] = f(v)
		}
		return out
	}
	lower := func(v string) string { return strings.ToLower(strings.TrimSpace(v)) }
	n := s
	n.Vendors = low(s.Vendors, normHex)
	n.DeviceIDs = low(s.DeviceIDs, normHex)
	n.PCIAddresses = low(s.PCIAddresses, lower)
	return n
}

// Match reports whether d matches the selectors. pf is the RDMA device of
// d's PF when d is a VF and the PF has one (nil otherwise); pfNames match its
// name, its netdevs or d's PhysFn address.
func (s Selectors) Match(d discovery.RDMADevice, pf *discovery.RDMADevice) bool {
	if s.IsEmpty() {
		return false
	}
	n := s.normalized()
	any := func(vals []string, ok func(string) bool) bool {
		return len(vals) == 0 || slices.ContainsFunc(vals, ok)
	}
	eq := func(x string) func(string) bool { return func(v string) bool { return v == x } }
	hasNetdev := func(devs []string) func(string) bool {
		return func(v string) bool { return slices.Contains(devs, v) }
	}
	return any(n.Vendors, eq(d.Vendor)) &&
		any(n.DeviceIDs, eq(d.Device)) &&
		any(n.Drivers, eq(d.Driver)) &&
		any(n.Netdevs, hasNetdev(d.Netdevs)) &&
		any(n.RDMADevices, eq(d.Name)) &&
		any(n.PCIAddresses, eq(d.PCIAddress)) &&
		any(n.LinkLayers, eq(d.LinkLayer)) &&
		any(n.Kinds, eq(string(d.Kind))) &&
		any(n.PFNames, func(v string) bool {
			if d.Kind != discovery.KindVF {
				return false
			}
			if strings.EqualFold(v, d.PhysFn) {
				return true
			}
			return pf != nil && (v == pf.Name || slices.Contains(pf.Netdevs, v))
		})
}

// Assign returns, for each pool by name, the devices it selects in the order
// given. A device selected by two exclusive pools is an error wrapping
// ErrOverlap (and ErrInvalid) that names the device and both pools; the
// other pools' assignments are still returned.
func (c Config) Assign(devs []discovery.RDMADevice) (map[string][]discovery.RDMADevice, error) {
	byPCI := map[string]*discovery.RDMADevice{}
	for i := range devs {
		if devs[i].Kind == discovery.KindPF {
			byPCI[devs[i].PCIAddress] = &devs[i]
		}
	}
	out := map[string][]discovery.RDMADevice{}
	owner := map[string]string{}
	var errs []error
	for _, p := range c.Pools {
		out[p.Name] = []discovery.RDMADevice{}
		for _, d := range devs {
			if !p.Selectors.Match(d, byPCI[d.PhysFn]) {
				continue
			}
			if p.Mode == Exclusive {
				if prev, taken := owner[d.Name]; taken {
					errs = append(errs, fmt.Errorf("%w: %w: %s is selected by pools %q and %q; it stays in %q",
						ErrInvalid, ErrOverlap, d.Name, prev, p.Name, prev))
					continue
				}
				owner[d.Name] = p.Name
			}
			out[p.Name] = append(out[p.Name], d)
		}
	}
	return out, errors.Join(errs...)
}
