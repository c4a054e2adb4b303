package cniinstall

import (
	"encoding/json"
	"testing"
)

// FuzzChainUnchain: on a conflist of any content, Chain and Unchain fail
// or keep every other plugin, in order, and every other top-level field;
// Chain leaves exactly one entry of ours, equal to the plugin, and is
// idempotent; Unchain of Chain's output leaves just the others.
func FuzzChainUnchain(f *testing.F) {
	const plugin = `{"type":"kube-rdma","resourceName":"rdma/hca"}`
	versions := []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}
	f.Add([]byte(conflistOf(calico, portmap)))
	f.Add([]byte(conflistOf(calico, oldOurs, portmap, oldOurs)))
	f.Add([]byte(`{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"portmap"}],"x":[1,2.50]}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"kube-rdma"}]}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[1,"a",null,{"type":"kube-rdma"}]}`))
	f.Fuzz(func(t *testing.T, conflist []byte) {
		_, in, listErr := list(conflist)
		var others []json.RawMessage
		for _, p := range in {
			if !isOurs(p) {
				others = append(others, p)
			}
		}

		out, changed, err := Chain(conflist, []byte(plugin), versions)
		if listErr != nil && err == nil {
			t.Fatalf("Chain accepted what is not a conflist (%v)", listErr)
		}
		if err == nil {
			_, got, err := list(out)
			if err != nil {
				t.Fatalf("Chain wrote what is not a conflist: %v\n%s", err, out)
			}
			var ours, kept []json.RawMessage
			for _, p := range got {
				if isOurs(p) {
					ours = append(ours, p)
				} else {
					kept = append(kept, p)
				}
			}
			if len(ours) != 1 || !equalJSON(ours[0], []byte(plugin)) {
				t.Errorf("Chain left %d entries of ours (%s), want one equal to the plugin", len(ours), ours)
			}
			samePlugins(t, "Chain", others, kept)
			sameTop(t, "Chain", conflist, out)
			if again, changed2, err := Chain(out, []byte(plugin), versions); err != nil || changed2 || string(again) != string(out) {
				t.Errorf("Chain of Chain's output: changed %v, err %v", changed2, err)
			}
			if !changed && string(out) != string(conflist) {
				t.Error("Chain changed the conflist but said it did not")
			}
			un, _, err := Unchain(out)
			if err != nil {
				t.Fatalf("Unchain of Chain's output: %v", err)
			}
			samePlugins(t, "Unchain(Chain)", others, pluginsOf(t, un))
			sameTop(t, "Unchain(Chain)", conflist, un)
		}

		un, changed, err := Unchain(conflist)
		if (err == nil) != (listErr == nil) {
			t.Fatalf("Unchain: err %v, but list: %v", err, listErr)
		}
		if err != nil {
			return
		}
		if changed != (len(others) != len(in)) {
			t.Errorf("Unchain: changed %v with %d of %d plugins ours", changed, len(in)-len(others), len(in))
		}
		samePlugins(t, "Unchain", others, pluginsOf(t, un))
		sameTop(t, "Unchain", conflist, un)
	})
}

// pluginsOf is a conflist's plugins, which may be none (Unchain's output).
func pluginsOf(t *testing.T, conflist []byte) []json.RawMessage {
	t.Helper()
	top, err := decodeObject(conflist)
	if err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, conflist)
	}
	raw, _ := top.get("plugins")
	var plugins []json.RawMessage
	if err := json.Unmarshal(raw, &plugins); err != nil {
		t.Fatalf("plugins: %v\n%s", err, conflist)
	}
	return plugins
}

func samePlugins(t *testing.T, what string, want, got []json.RawMessage) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%s kept %d other plugins, want %d:\n%s\n%s", what, len(got), len(want), got, want)
	}
	for i := range want {
		if !equalJSON(want[i], got[i]) {
			t.Errorf("%s: other plugin %d is %s, want %s", what, i, got[i], want[i])
		}
	}
}

// sameTop checks that out has in's top-level fields, in order, with the
// same values, plugins aside.
func sameTop(t *testing.T, what string, in, out []byte) {
	t.Helper()
	a, err := decodeObject(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeObject(out)
	if err != nil {
		t.Fatalf("%s wrote what is not a JSON object: %v", what, err)
	}
	if len(a) != len(b) {
		t.Fatalf("%s: %d top-level fields, want %d", what, len(b), len(a))
	}
	for i := range a {
		if a[i].key != b[i].key || (a[i].key != "plugins" && !equalJSON(a[i].val, b[i].val)) {
			t.Errorf("%s: field %d is %q: %s, want %q: %s", what, i, b[i].key, b[i].val, a[i].key, a[i].val)
		}
	}
}
