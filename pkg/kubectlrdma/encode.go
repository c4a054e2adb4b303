package kubectlrdma

import (
	"bytes"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// escapeEncoded writes each control or format character left in encoded
// JSON (yaml false) or YAML as an escape: \uXXXX (a surrogate pair above
// U+FFFF) in JSON, \uXXXX or \UXXXXXXXX in YAML. In JSON such characters
// occur only inside strings, where the escape means the same character; in
// the YAML of toYAML only inside double-quoted scalars, where it does too.
// Newlines (the encoders' layout; they escape those inside strings) stay.
func escapeEncoded(b []byte, yaml bool) []byte {
	if !needsEscape(string(bytes.ReplaceAll(b, []byte("\n"), nil))) {
		return b
	}
	var out bytes.Buffer
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == '\n' || !unsafeRune(r):
			out.Write(b[i : i+n])
		case r > 0xffff && yaml:
			fmt.Fprintf(&out, `\U%08x`, r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
		i += n
	}
	return out.Bytes()
}

// toYAML is the YAML of JSON document j as kubectl writes it
// (sigs.k8s.io/yaml), unless a string in it holds a control or format
// character the YAML emitter would write raw (it escapes only what YAML
// calls non-printable: not DEL's neighbours in C1 such as NEL, nor U+202E).
// Then every such string is emitted double-quoted, where escapeEncoded's
// escapes are read back as the same characters.
func toYAML(j []byte) ([]byte, error) {
	if !needsEscape(string(bytes.ReplaceAll(j, []byte("\n"), nil))) {
		return yaml.JSONToYAML(j)
	}
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	restyle(&doc)
	var out bytes.Buffer
	enc := yamlv3.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return escapeEncoded(out.Bytes(), true), nil
}

// restyle drops the JSON styles (flow collections, quoted scalars) the
// parser kept, and double-quotes the strings that need escapes.
func restyle(n *yamlv3.Node) {
	n.Style = 0
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!str" && needsEscape(n.Value) {
		n.Style = yamlv3.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		restyle(c)
	}
}
