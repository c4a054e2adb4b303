package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var versions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

const (
	ours     = `{"type":"kube-rdma","resourceName":"rdma/hca"}`
	oldOurs  = `{"type":"kube-rdma","resourceName":"rdma/old"}`
	calico   = `{"type":"calico","ipam":{"type":"calico-ipam"},"big":12345678901234567890,"ratio":1.50}`
	portmap  = `{"type":"portmap","capabilities":{"portMappings":true},"x-unknown":[1,{"a":null}]}`
	listHead = `{"cniVersion":"1.0.0","name":"k8s-pod-network","x-vendor":{"keep":true},"plugins":[`
)

func conflistOf(plugins ...string) string {
	s := listHead
	for i, p := range plugins {
		if i > 0 {
			s += ","
		}
		s += p
	}
	return s + `],"disableCheck":false}`
}

// decoded decodes JSON for comparison, numbers as written.
func decoded(t *testing.T, data []byte) any {
	t.Helper()
	var v any
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return v
}

func keys(t *testing.T, data []byte) []string {
	t.Helper()
	o, err := decodeObject(data)
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, m := range o {
		ks = append(ks, m.key)
	}
	return ks
}

func TestChain(t *testing.T) {
	tests := []struct {
		name     string
		conflist string
		plugin   string
		want     string // "" when unchanged
		err      error
	}{
		{name: "insert last", conflist: conflistOf(calico, portmap), plugin: ours, want: conflistOf(calico, portmap, ours)},
		{name: "replace in place", conflist: conflistOf(calico, oldOurs, portmap), plugin: ours, want: conflistOf(calico, ours, portmap)},
		{name: "duplicates dropped", conflist: conflistOf(oldOurs, calico, oldOurs), plugin: ours, want: conflistOf(ours, calico)},
		{name: "already there", conflist: conflistOf(calico, ours, portmap), plugin: ours},
		{name: "already there, other key order and spacing", conflist: conflistOf(calico, "{ \"resourceName\": \"rdma/hca\",\n \"type\": \"kube-rdma\" }"), plugin: ours},
		{name: "0.4.0", conflist: `{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"bridge"}]}`, plugin: ours,
			want: `{"cniVersion":"0.4.0","name":"n","plugins":[{"type":"bridge"},` + ours + `]}`},
		// Flannel's and Cilium's lists.
		{name: "0.3.1", conflist: `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"portmap"}]}`, plugin: ours,
			want: `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"portmap"},` + ours + `]}`},
		{name: "unsupported cniVersion", conflist: `{"cniVersion":"0.2.0","name":"n","plugins":[{"type":"bridge"}]}`, plugin: ours, err: ErrUnsupportedVersion},
		{name: "no cniVersion", conflist: `{"name":"n","plugins":[{"type":"bridge"}]}`, plugin: ours, err: ErrUnsupportedVersion},
		{name: "single plugin conf", conflist: `{"cniVersion":"1.0.0","name":"n","type":"bridge"}`, plugin: ours, err: ErrNotList},
		{name: "empty plugins", conflist: `{"cniVersion":"1.0.0","name":"n","plugins":[]}`, plugin: ours, err: ErrNotList},
		{name: "plugins not a list", conflist: `{"cniVersion":"1.0.0","name":"n","plugins":{}}`, plugin: ours, err: ErrNotList},
		{name: "array", conflist: `[]`, plugin: ours, err: ErrNotList},
		{name: "truncated", conflist: conflistOf(calico)[:40], plugin: ours, err: ErrNotList},
		{name: "trailing data", conflist: conflistOf(calico) + "{}", plugin: ours, err: ErrNotList},
		{name: "duplicate key", conflist: `{"cniVersion":"1.0.0","cniVersion":"1.1.0","plugins":[{"type":"bridge"}]}`, plugin: ours, err: ErrNotList},
		{name: "plugin with name", conflist: conflistOf(calico), plugin: `{"type":"kube-rdma","name":"x"}`, err: ErrBadPlugin},
		{name: "plugin with cniVersion", conflist: conflistOf(calico), plugin: `{"type":"kube-rdma","cniVersion":"1.0.0"}`, err: ErrBadPlugin},
		{name: "plugin of another type", conflist: conflistOf(calico), plugin: `{"type":"bridge"}`, err: ErrBadPlugin},
		{name: "plugin not an object", conflist: conflistOf(calico), plugin: `["kube-rdma"]`, err: ErrBadPlugin},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, err := Chain([]byte(tt.conflist), []byte(tt.plugin), versions)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Chain error = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if tt.want == "" {
				if changed || string(out) != tt.conflist {
					t.Errorf("Chain changed %s into %s", tt.conflist, out)
				}
				return
			}
			if !changed {
				t.Error("Chain reports no change")
			}
			checkSame(t, tt.want, out)
		})
	}
}

// checkSame compares out with want as JSON, then checks the top-level keys'
// order and that every value is kept as written (numbers included).
func checkSame(t *testing.T, want string, out []byte) {
	t.Helper()
	if diff := cmp.Diff(decoded(t, []byte(want)), decoded(t, out)); diff != "" {
		t.Errorf("conflist (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(keys(t, []byte(want)), keys(t, out)); diff != "" {
		t.Errorf("top-level key order (-want +got):\n%s", diff)
	}
	var w, g bytes.Buffer
	if err := json.Compact(&w, []byte(want)); err != nil {
		t.Fatal(err)
	}
	if err := json.Compact(&g, out); err != nil {
		t.Fatal(err)
	}
	if w.String() != g.String() {
		t.Errorf("compacted output %s, want %s", g.String(), w.String())
	}
}

func TestUnchain(t *testing.T) {
	tests := []struct {
		name     string
		conflist string
		want     string // "" when unchanged
		err      error
	}{
		{name: "middle", conflist: conflistOf(calico, ours, portmap), want: conflistOf(calico, portmap)},
		{name: "every entry", conflist: conflistOf(ours, calico, oldOurs), want: conflistOf(calico)},
		{name: "none", conflist: conflistOf(calico, portmap)},
		{name: "unsupported cniVersion still cleaned", conflist: `{"cniVersion":"0.2.0","plugins":[{"type":"bridge"},` + ours + `]}`,
			want: `{"cniVersion":"0.2.0","plugins":[{"type":"bridge"}]}`},
		{name: "not a list", conflist: `{"cniVersion":"1.0.0","type":"kube-rdma"}`, err: ErrNotList},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed, err := Unchain([]byte(tt.conflist))
			if !errors.Is(err, tt.err) {
				t.Fatalf("Unchain error = %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			if tt.want == "" {
				if changed || string(out) != tt.conflist {
					t.Errorf("Unchain changed %s into %s", tt.conflist, out)
				}
				return
			}
			if !changed {
				t.Error("Unchain reports no change")
			}
			checkSame(t, tt.want, out)
		})
	}
}

// Chain then Unchain gives back the conflist, as JSON and key order.
func TestChainUnchainRoundTrip(t *testing.T) {
	in := conflistOf(calico, portmap)
	out, _, err := Chain([]byte(in), []byte(ours), versions)
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := Unchain(out)
	if err != nil {
		t.Fatal(err)
	}
	checkSame(t, in, back)
}

func TestNamesPlugin(t *testing.T) {
	for _, tt := range []struct {
		conf string
		want bool
	}{
		{conflistOf(calico, ours), true},
		{conflistOf(calico), false},
		{`{"cniVersion":"1.0.0","name":"n","type":"kube-rdma"}`, true},
		{`{"type":"multus","delegates":[` + conflistOf(calico, ours) + `]}`, true},
		{`{"type":"bridge","note":"kube-rdma"}`, false},
		{`not json kube-rdma`, false},
	} {
		if got := NamesPlugin([]byte(tt.conf)); got != tt.want {
			t.Errorf("NamesPlugin(%s) = %v, want %v", tt.conf, got, tt.want)
		}
	}
}
