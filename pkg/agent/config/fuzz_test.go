package config

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"sigs.k8s.io/yaml"
)

// FuzzParse: a pools file of any content parses into a valid config or
// fails with ErrInvalid, never panics; a config that parses, written back
// as YAML, parses the same.
func FuzzParse(f *testing.F) {
	f.Add([]byte("resourcePrefix: rdma.example.com\npools:\n- name: gpu-nics\n  mode: exclusive\n  selectors:\n    vendors: [\"0x15B3\"]\n    linkLayers: [InfiniBand]\n"))
	f.Add([]byte(`{"pools":[{"name":"r","mode":"shared","slots":8,"nccl":false,"memlock":"64Gi","selectors":{"linkLayers":["Ethernet"]}}]}`))
	f.Add([]byte(`{"pools":[{"name":"a","mode":"exclusive","binding":"gpuAligned","frontend":"dra","selectors":{"pfNames":["ens1"],"kinds":["vf"]}}]}`))
	f.Add([]byte("pools: [{name: x, mode: exclusive, selectors: {vendors: [15b3]}}, {name: x}]"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse failed without ErrInvalid: %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse returned a config that does not validate: %v", err)
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("marshal a parsed config: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of the config written back: %v\n%s", err, out)
		}
		if diff := cmp.Diff(c, again, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("config written back parses differently (-parsed +reparsed):\n%s", diff)
		}
	})
}

// FuzzParseMemlock: any string parses to a positive limit or fails with
// ErrBadMemlock; a limit that parses is written by FormatMemlock as a
// string that parses back to it.
func FuzzParseMemlock(f *testing.F) {
	for _, s := range []string{"unlimited", "Infinity", "64Gi", "8M", "1073741824", "0.5", "1e3", "-1", "", "9223372036854775807", "18446744073709551615", "1Ei", "100m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseMemlock(s)
		if err != nil {
			if !errors.Is(err, ErrBadMemlock) {
				t.Fatalf("ParseMemlock(%q) failed without ErrBadMemlock: %v", s, err)
			}
			return
		}
		if v == 0 || (v > math.MaxInt64 && v != MemlockUnlimited) {
			t.Fatalf("ParseMemlock(%q) = %d", s, v)
		}
		f := FormatMemlock(v)
		back, err := ParseMemlock(f)
		if err != nil || back != v {
			t.Errorf("ParseMemlock(%q) = %d, written %q, read back %d, %v", s, v, f, back, err)
		}
	})
}
