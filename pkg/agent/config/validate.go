package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/allocdir"
)

// FieldError is one validation failure; Field is the path in the file
// ("pools[1].selectors.linkLayers[0]").
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes every FieldError match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// MaxSlots bounds a shared pool's slot count: the kubelet keeps one entry per
// device in its checkpoint and sends the whole list on every update.
const MaxSlots = 10000

var (
	// A resource name's name part, as the kubelet's qualified-name check wants it.
	nameRE = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	// One DNS-1123 label.
	labelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	hexID   = regexp.MustCompile(`^[0-9a-f]{4}$`)
)

// Validate checks the whole configuration and returns every problem found,
// each a *FieldError joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	if msg := checkPrefix(c.ResourcePrefix); msg != "" {
		add("resourcePrefix", "%s", msg)
	}
	if len(c.Pools) == 0 {
		add("pools", "at least one pool is required")
	}
	names := map[string]int{}
	envs := map[string]int{}
	for i, p := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		switch {
		case p.Name == "":
			add(f+".name", "is required")
		case len(p.Name) > 63:
			add(f+".name", "%q is longer than 63 characters, the kubelet rejects the resource name", p.Name)
		case !nameRE.MatchString(p.Name):
			add(f+".name", "%q must be letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or the kubelet rejects the resource name", p.Name)
		default:
			if j, dup := names[p.Name]; dup {
				add(f+".name", "%q is also the name of pools[%d]", p.Name, j)
			} else {
				names[p.Name] = i
				env := EnvName(p.Name)
				if j, dup := envs[env]; dup {
					add(f+".name", "%q gives the same environment variable prefix %s as pools[%d]", p.Name, env, j)
				}
				envs[env] = i
			}
		}
		switch p.Mode {
		case Exclusive:
			if p.Slots != 0 {
				add(f+".slots", "is only valid for a shared pool")
			}
		case Shared:
			if p.Slots < 0 || p.Slots > MaxSlots {
				add(f+".slots", "%d is out of range 0..%d", p.Slots, MaxSlots)
			}
		case "":
			add(f+".mode", "is required (exclusive or shared)")
		default:
			add(f+".mode", "%q is not exclusive or shared", p.Mode)
		}
		switch {
		case p.Binding != KubeletBinding && p.Binding != GPUAligned:
			add(f+".binding", "%q is not gpuAligned (or empty)", p.Binding)
		case p.Binding == GPUAligned && p.Mode == Shared:
			add(f+".binding", "gpuAligned is only valid for an exclusive pool: every pod of a shared pool gets all of its devices, there is nothing to bind")
		}
		switch p.Frontend {
		case "", DevicePlugin:
		case DRA:
			if p.GPUAligned() {
				add(f+".frontend", "dra and binding gpuAligned do not go together: with DRA the scheduler aligns NICs and GPUs (matchAttribute on resource.kubernetes.io/pcieRoot or kube-rdma.io/pcieSwitch)")
			}
		default:
			add(f+".frontend", "%q is not devicePlugin or dra: a pool is served by exactly one front end", p.Frontend)
		}
		if p.Memlock != "" {
			if _, err := ParseMemlock(p.Memlock); err != nil {
				add(f+".memlock", "%v", err)
			}
		}
		errs = append(errs, p.Selectors.validate(f+".selectors")...)
	}
	errs = append(errs, c.overlaps()...)
	return errors.Join(errs...)
}

func checkPrefix(p string) string {
	switch {
	case p == "":
		return "is required (a DNS subdomain such as rdma.example.com)"
	case len(p) > 253:
		return fmt.Sprintf("%q is longer than 253 characters", p)
	case p == "kubernetes.io" || strings.HasSuffix(p, ".kubernetes.io") || p == "k8s.io" || strings.HasSuffix(p, ".k8s.io"):
		return fmt.Sprintf("%q is reserved for Kubernetes; the kubelet does not accept device plugin resources in it", p)
	}
	for _, l := range strings.Split(p, ".") {
		if len(l) > 63 || !labelRE.MatchString(l) {
			return fmt.Sprintf("%q is not a DNS subdomain (lower-case letters, digits, '-' and '.')", p)
		}
	}
	return ""
}

func (s Selectors) validate(f string) []error {
	var errs []error
	add := func(field, format string, a ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, a...)})
	}
	if s.IsEmpty() {
		add(f, "at least one selector is required (to take every device, use kinds: [PF, VF, SF, virtual])")
		return errs
	}
	each := func(name string, vals []string, check func(string) string) {
		for i, v := range vals {
			if msg := check(v); msg != "" {
				add(fmt.Sprintf("%s.%s[%d]", f, name, i), "%s", msg)
			}
		}
	}
	notEmpty := func(v string) string {
		if strings.TrimSpace(v) == "" {
			return "is empty"
		}
		return ""
	}
	hex := func(v string) string {
		if !hexID.MatchString(normHex(v)) {
			return fmt.Sprintf("%q is not a 4-digit hex PCI ID such as 15b3", v)
		}
		return ""
	}
	each("vendors", s.Vendors, hex)
	each("deviceIDs", s.DeviceIDs, hex)
	each("drivers", s.Drivers, notEmpty)
	each("netdevs", s.Netdevs, notEmpty)
	each("rdmaDevices", s.RDMADevices, notEmpty)
	each("pfNames", s.PFNames, notEmpty)
	each("pciAddresses", s.PCIAddresses, func(v string) string {
		if !discovery.IsPCIAddress(v) {
			return fmt.Sprintf("%q is not a PCI address such as 0000:18:00.0", v)
		}
		return ""
	})
	each("linkLayers", s.LinkLayers, func(v string) string {
		if v != "InfiniBand" && v != "Ethernet" {
			return fmt.Sprintf("%q is not InfiniBand or Ethernet", v)
		}
		return ""
	})
	each("kinds", s.Kinds, func(v string) string {
		switch discovery.DeviceKind(v) {
		case discovery.KindPF, discovery.KindVF, discovery.KindSF, discovery.KindVirtual:
			return ""
		}
		return fmt.Sprintf("%q is not PF, VF, SF or virtual", v)
	})
	if len(s.PFNames) > 0 && len(s.Kinds) > 0 && !slices.Contains(s.Kinds, string(discovery.KindVF)) {
		add(f+".pfNames", "selects VFs but kinds does not include VF, so the pool is always empty")
	}
	return errs
}

// overlaps rejects exclusive pools that could both take one device, and a
// dra pool that could take a device of any other pool. Two
// pools are disjoint only when some selector field set in both has no value
// in common (pfNames counts as kinds [VF]); anything else could select the
// same device on some node.
func (c Config) overlaps() []error {
	var errs []error
	for i := range c.Pools {
		for j := 0; j < i; j++ {
			a, b := c.Pools[i], c.Pools[j]
			dra := a.DRA() || b.DRA()
			if (!dra && (a.Mode != Exclusive || b.Mode != Exclusive)) || a.Selectors.IsEmpty() || b.Selectors.IsEmpty() {
				continue
			}
			switch {
			case a.Selectors.disjoint(b.Selectors):
			case dra:
				errs = append(errs, &FieldError{
					Field: fmt.Sprintf("pools[%d].selectors", i),
					Msg: fmt.Sprintf("pool %q may select the same devices as pool %q (pools[%d]), and one of them has frontend dra: "+
						"a device is served by exactly one front end; give both a selector field with no value in common", a.Name, b.Name, j),
				})
			default:
				errs = append(errs, &FieldError{
					Field: fmt.Sprintf("pools[%d].selectors", i),
					Msg: fmt.Sprintf("exclusive pool %q may select the same devices as exclusive pool %q (pools[%d]); "+
						"give both a selector field with no value in common", a.Name, b.Name, j),
				})
			}
		}
	}
	return errs
}

func (s Selectors) disjoint(o Selectors) bool {
	n := s.normalized()
	m := o.normalized()
	pairs := [][2][]string{
		{n.Vendors, m.Vendors}, {n.DeviceIDs, m.DeviceIDs}, {n.Drivers, m.Drivers},
		{n.RDMADevices, m.RDMADevices}, {n.PCIAddresses, m.PCIAddresses},
		{n.LinkLayers, m.LinkLayers}, {n.kinds(), m.kinds()},
	}
	for _, p := range pairs {
		if len(p[0]) > 0 && len(p[1]) > 0 && !intersects(p[0], p[1]) {
			return true
		}
	}
	return false
}

// kinds returns the kinds a selector can match, with pfNames implying VF.
func (s Selectors) kinds() []string {
	if len(s.PFNames) == 0 {
		return s.Kinds
	}
	if len(s.Kinds) == 0 || slices.Contains(s.Kinds, string(discovery.KindVF)) {
		return []string{string(discovery.KindVF)}
	}
	return nil
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// EnvName turns a pool name into the upper-case stem of its environment
// variables: "gpu-nics" -> "GPU_NICS".
func EnvName(pool string) string { return allocdir.EnvName(pool) }

func normHex(v string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	return strings.TrimPrefix(v, "0x")
}
