package kubectlrdma

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// escapeString makes s safe to print on a terminal: each C0 and C1 control
// character (tab, newline and carriage return included: they would break a
// table's rows), DEL, each bidirectional or other format character that
// reorders or hides text (U+202E, U+200B, ...) and each byte of invalid
// UTF-8 becomes a visible escape (\x1b, \t, \u202e, \xff), as strconv.Quote
// writes them, without the quotes. Printable text, non-ASCII letters
// included, and backslashes are left as they are.
func escapeString(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b.WriteString(`\x`)
			b.WriteString(strconv.FormatUint(uint64(s[i])|0x100, 16)[1:])
		} else if unsafeRune(r) {
			q := strconv.QuoteRuneToASCII(r) // '\x1b', '\u202e'
			b.WriteString(q[1 : len(q)-1])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsEscape(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			return true
		}
		i += n
	}
	return false
}

// unsafeRune: controls (C0, DEL, C1) and format characters (Cf: bidi
// overrides and isolates, zero-width characters).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
}

// escapeAll replaces every string reachable from v (a pointer) through
// exported struct fields, pointers, slices, arrays, maps (keys and values)
// and interfaces with escapeString of it, in place. Callers pass a deep
// copy: the printers' inputs are escaped as a whole where they enter
// (writePods, writeChecks, the topo table; writeNodes escapes each cell),
// so a new column cannot print a raw string.
func escapeAll(v any) {
	escapeValue(reflect.ValueOf(v))
}

func escapeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.SetString(escapeString(v.String()))
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			if v.Kind() == reflect.Interface {
				// An interface's dynamic value cannot be set in place:
				// escape a copy and store it back.
				e := v.Elem()
				c := reflect.New(e.Type()).Elem()
				c.Set(e)
				escapeValue(c)
				if v.CanSet() {
					v.Set(c)
				}
				return
			}
			escapeValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				escapeValue(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			escapeValue(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		kt, et := v.Type().Key(), v.Type().Elem()
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k, e := reflect.New(kt).Elem(), reflect.New(et).Elem()
			k.Set(it.Key())
			e.Set(it.Value())
			escapeValue(k)
			escapeValue(e)
			out.SetMapIndex(k, e)
		}
		if v.CanSet() {
			v.Set(out)
		}
	}
}

// escapedPods is an escaped deep copy of pods' allocations.
func escapedPods(in []PodAllocation) []PodAllocation {
	out := make([]PodAllocation, len(in))
	for i, a := range in {
		a.Resources, a.NICs, a.GPUs = slices.Clone(a.Resources), slices.Clone(a.NICs), slices.Clone(a.GPUs)
		a.Claims, a.DeviceHealth = slices.Clone(a.Claims), slices.Clone(a.DeviceHealth)
		escapeAll(&a)
		out[i] = a
	}
	return out
}
