// Package jsonkeep keeps the keys of a JSON object that a struct does not
// know, so that a binary that reads a file written by a newer one and
// writes it back (a rollback; two binaries of one node at different
// versions) leaves the newer fields where they were instead of dropping
// them. A contract type embeds Unknown (json:"-"), fills it in its
// UnmarshalJSON with Split and adds it back in its MarshalJSON with Merge.
//
// Known keys are those of the struct's JSON encoding (its exported fields,
// by their json tags, embedded structs included), so a known field the
// writer cleared is never resurrected from the bytes it read. It does no
// I/O and imports the standard library only.
package jsonkeep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Unknown are the keys of an object that its struct does not know, with
// their values as read.
type Unknown map[string]json.RawMessage

var known sync.Map // reflect.Type -> map[string]bool

// Keys are the JSON keys of struct type t.
func Keys(t reflect.Type) map[string]bool {
	if k, ok := known.Load(t); ok {
		return k.(map[string]bool)
	}
	k := map[string]bool{}
	addKeys(t, k)
	known.Store(t, k)
	return k
}

func addKeys(t reflect.Type, k map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addKeys(ft, k)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		k[name] = true
	}
}

// Split returns the keys of the JSON object data that struct type t does
// not know (matched as encoding/json matches them: case-insensitively);
// nil when there are none or data is not an object.
func Split(data []byte, t reflect.Type) Unknown {
	var all map[string]json.RawMessage
	if json.Unmarshal(data, &all) != nil {
		return nil
	}
	keys := Keys(t)
	var out Unknown
	for key, v := range all {
		if keys[key] || knownFold(keys, key) {
			continue
		}
		if out == nil {
			out = Unknown{}
		}
		out[key] = canonical(v)
	}
	return out
}

// canonical is v as encoding/json writes a MarshalJSON result: compact,
// with <, >, &, U+2028 and U+2029 escaped. Kept that way, a value read,
// written (json.Marshal escapes and compacts a Marshaler's bytes) and read
// back is the same bytes; the escapes change no value.
func canonical(v json.RawMessage) json.RawMessage {
	var c bytes.Buffer
	if json.Compact(&c, v) != nil {
		return v
	}
	var e bytes.Buffer
	json.HTMLEscape(&e, c.Bytes())
	return e.Bytes()
}

func knownFold(keys map[string]bool, key string) bool {
	for k := range keys {
		if strings.EqualFold(k, key) {
			return true
		}
	}
	return false
}

// Merge appends the unknown keys u, sorted, to the JSON object data (the
// struct's own encoding), leaving a key data has already alone.
func Merge(data []byte, u Unknown) ([]byte, error) {
	if len(u) == 0 {
		return data, nil
	}
	var have map[string]json.RawMessage
	if err := json.Unmarshal(data, &have); err != nil {
		return nil, fmt.Errorf("merge unknown keys: %w", err)
	}
	body := bytes.TrimSpace(data)
	if len(body) < 2 || body[len(body)-1] != '}' {
		return nil, fmt.Errorf("merge unknown keys: not a JSON object")
	}
	var b bytes.Buffer
	b.Write(body[:len(body)-1])
	sep := len(have) > 0
	for _, k := range slices.Sorted(maps.Keys(u)) {
		if _, ok := have[k]; ok {
			continue
		}
		if sep {
			b.WriteByte(',')
		}
		sep = true
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(u[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}
