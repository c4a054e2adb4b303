// Package cniinstall installs the kube-rdma CNI plugin on a node: its binary
// in the CNI bin directory and its entry in the primary network's conflist,
// kept there while a watch runs and taken out on exit. Every file it writes
// is replaced atomically (temporary file in the same directory, fsync,
// rename), so a runtime reads the old file or the new one, never a part.
//
// It does no netlink and reads no sysfs: files, inotify and logs only.
package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
)

// PluginType is the plugin's "type": the conflist entry it owns.
const PluginType = "kube-rdma"

var (
	// ErrNotList marks a file that is not a conflist (no "plugins" list).
	ErrNotList = errors.New("not a CNI conflist")
	// ErrUnsupportedVersion marks a conflist whose cniVersion the plugin
	// does not speak.
	ErrUnsupportedVersion = errors.New("unsupported cniVersion")
	// ErrBadPlugin marks a plugin configuration that cannot be chained.
	ErrBadPlugin = errors.New("bad plugin configuration")
)

// member is one key of a JSON object, its value as written.
type member struct {
	key string
	val json.RawMessage
}

// object is a JSON object that keeps its keys' order and their values'
// bytes, so that rewriting a conflist keeps what this package does not know.
type object []member

func decodeObject(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var o object
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("decode JSON: %w", err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("decode JSON: %w", err)
		}
		if _, dup := o.get(key); dup {
			return nil, fmt.Errorf("duplicate key %q", key)
		}
		o = append(o, member{key, val})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("decode JSON: data after the object")
	}
	return o, nil
}

func (o object) get(key string) (json.RawMessage, bool) {
	for _, m := range o {
		if m.key == key {
			return m.val, true
		}
	}
	return nil, false
}

func (o object) set(key string, val json.RawMessage) object {
	for i := range o {
		if o[i].key == key {
			o[i].val = val
			return o
		}
	}
	return append(o, member{key, val})
}

// str returns the string value of key, "" when missing or not a string.
func (o object) str(key string) string {
	var s string
	if raw, ok := o.get(key); ok {
		_ = json.Unmarshal(raw, &s) // not a string: ""
	}
	return s
}

// encode writes the object indented by two spaces, with a final newline.
func (o object) encode() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.val)
	}
	b.WriteByte('}')
	var out bytes.Buffer
	_ = json.Indent(&out, b.Bytes(), "", "  ") // valid: every value was decoded
	out.WriteByte('\n')
	return out.Bytes()
}

// CheckPlugin checks a plugin configuration to chain: a JSON object whose
// type is kube-rdma, without cniVersion and name (the list's apply).
func CheckPlugin(plugin []byte) error {
	o, err := decodeObject(plugin)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadPlugin, err)
	}
	if t := o.str("type"); t != PluginType {
		return fmt.Errorf("%w: type is %q, want %q", ErrBadPlugin, t, PluginType)
	}
	for _, k := range []string{"cniVersion", "name"} {
		if _, ok := o.get(k); ok {
			return fmt.Errorf("%w: it has %q, which the conflist sets", ErrBadPlugin, k)
		}
	}
	return nil
}

// list decodes a conflist: its top-level object and its plugins.
func list(conflist []byte) (object, []json.RawMessage, error) {
	top, err := decodeObject(conflist)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrNotList, err)
	}
	raw, ok := top.get("plugins")
	var plugins []json.RawMessage
	if !ok || json.Unmarshal(raw, &plugins) != nil || len(plugins) == 0 {
		return nil, nil, fmt.Errorf("%w: no \"plugins\" list", ErrNotList)
	}
	return top, plugins, nil
}

func isOurs(plugin json.RawMessage) bool {
	o, err := decodeObject(plugin)
	return err == nil && o.str("type") == PluginType
}

// Chain puts plugin into a conflist: it replaces, in place, the entry whose
// type is kube-rdma (and drops any later one), or appends it as the last
// plugin. Everything else (other plugins, their order, unknown fields) is
// kept. changed is false, and out is conflist, when the entry is there
// already, equal as JSON. versions are the cniVersions the plugin speaks.
func Chain(conflist, plugin []byte, versions []string) (out []byte, changed bool, err error) {
	if err := CheckPlugin(plugin); err != nil {
		return nil, false, err
	}
	top, plugins, err := list(conflist)
	if err != nil {
		return nil, false, err
	}
	if v := top.str("cniVersion"); !slices.Contains(versions, v) {
		return nil, false, fmt.Errorf("%w: conflist has %q, the plugin speaks %v", ErrUnsupportedVersion, v, versions)
	}
	var ours []int
	for i, p := range plugins {
		if isOurs(p) {
			ours = append(ours, i)
		}
	}
	if len(ours) == 1 && equalJSON(plugins[ours[0]], plugin) {
		return conflist, false, nil
	}
	var compact bytes.Buffer
	_ = json.Compact(&compact, plugin) // valid: CheckPlugin decoded it
	if len(ours) == 0 {
		plugins = append(plugins, compact.Bytes())
	} else {
		var kept []json.RawMessage
		for i, p := range plugins {
			switch {
			case i == ours[0]:
				kept = append(kept, compact.Bytes())
			case !slices.Contains(ours, i):
				kept = append(kept, p)
			}
		}
		plugins = kept
	}
	return setPlugins(top, plugins), true, nil
}

// Unchain takes every kube-rdma entry out of a conflist, keeping the rest.
// changed is false, and out is conflist, when there is none.
func Unchain(conflist []byte) (out []byte, changed bool, err error) {
	top, plugins, err := list(conflist)
	if err != nil {
		return nil, false, err
	}
	kept := slices.DeleteFunc(slices.Clone(plugins), isOurs)
	if len(kept) == len(plugins) {
		return conflist, false, nil
	}
	return setPlugins(top, kept), true, nil
}

func setPlugins(top object, plugins []json.RawMessage) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, p := range plugins {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p)
	}
	b.WriteByte(']')
	return top.set("plugins", b.Bytes()).encode()
}

// NamesPlugin reports whether a CNI configuration names kube-rdma: an
// object whose type is kube-rdma anywhere in it (a conflist's plugin, a
// single .conf, a delegate in Multus's generated configuration).
func NamesPlugin(conf []byte) bool {
	var v any
	if json.Unmarshal(conf, &v) != nil {
		return false
	}
	return namesPlugin(v)
}

func namesPlugin(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if v["type"] == PluginType {
			return true
		}
		for _, e := range v {
			if namesPlugin(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, namesPlugin)
	}
	return false
}

// equalJSON reports whether a and b decode to the same value.
func equalJSON(a, b []byte) bool {
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	return da.Decode(&va) == nil && db.Decode(&vb) == nil && reflect.DeepEqual(va, vb)
}
