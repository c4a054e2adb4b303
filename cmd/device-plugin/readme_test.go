package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// contract maps an object's path ("", "rdmaDevices[]", "rdmaDevices[].ports[]",
// ...) to its keys, each true when the key may be left out.
type contract map[string]map[string]bool

// readmeContract parses the JSON key list quoted in docs/discovery.md: the
// first ```text block that starts with {"rdmaDevices".
func readmeContract(t *testing.T) contract {
	t.Helper()
	b, err := os.ReadFile("../../docs/discovery.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```text\n(\\{\"rdmaDevices\".*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/discovery.md quotes no JSON key list (a ```text block starting with {\"rdmaDevices\")")
	}
	toks := regexp.MustCompile(`"[A-Za-z0-9]+"|\?|:|\[|\]|\{|\}|,|\.\.\.|\S`).FindAllString(string(m[1]), -1)
	c := contract{}
	var stack []string // paths of the open objects
	pending := ""      // path of the object the next { opens
	for i := 0; i < len(toks); i++ {
		switch tok := toks[i]; {
		case tok == "{":
			stack = append(stack, pending)
			if c[pending] == nil {
				c[pending] = map[string]bool{}
			}
		case tok == "}":
			stack = stack[:len(stack)-1]
		case strings.HasPrefix(tok, `"`):
			key := strings.Trim(tok, `"`)
			optional := i+1 < len(toks) && toks[i+1] == "?"
			if optional {
				i++
			}
			top := stack[len(stack)-1]
			c[top][key] = optional
			if i+1 < len(toks) && toks[i+1] == ":" {
				pending = strings.TrimPrefix(top+"."+key, ".")
				if i+2 < len(toks) && toks[i+2] == "[" {
					pending += "[]"
				}
			}
		case tok == "?" || tok == ":" || tok == "[" || tok == "]" || tok == "," || tok == "...":
		default:
			t.Fatalf("docs/discovery.md JSON key list: unexpected %q", tok)
		}
	}
	return c
}

// codeContract is the contract the Go types declare: json tags, omitempty
// for the keys that may be left out.
func codeContract() contract {
	c := contract{}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		c[path] = map[string]bool{}
		for f := range typ.Fields() {
			tag := f.Tag.Get("json")
			if tag == "" || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			c[path][name] = strings.Contains(opts, "omitempty")
			ft := f.Type
			sub := strings.TrimPrefix(path+"."+name, ".")
			if ft.Kind() == reflect.Slice {
				ft, sub = ft.Elem(), sub+"[]"
			}
			if ft.Kind() == reflect.Struct {
				walk(sub, ft)
			}
		}
	}
	walk("", reflect.TypeFor[discovery.Node]())
	return c
}

// outputContract scans the built-in sample nodes with `discover -o json`
// and records each object's keys, optional when some object lacks it.
func outputContract(t *testing.T) contract {
	t.Helper()
	seen, count := map[string]map[string]int{}, map[string]int{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			count[path]++
			if seen[path] == nil {
				seen[path] = map[string]int{}
			}
			for k, sub := range v {
				seen[path][k]++
				walk(strings.TrimPrefix(path+"."+k, "."), sub)
			}
		case []any:
			for _, e := range v {
				walk(path+"[]", e)
			}
		}
	}
	for _, name := range nodesim.Names() {
		if name == "synthetic" { // 1,024 copies of the keys the others have; most of the time
			continue
		}
		topo, _ := nodesim.Named(name)
		tree, err := nodesim.Build(t.TempDir(), topo)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out, errOut bytes.Buffer
		if err := dispatch(context.Background(), []string{"discover", "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot, "-o", "json"}, &out, &errOut); err != nil {
			t.Fatalf("%s: discover: %v (%s)", name, err, errOut.String())
		}
		var v any
		if err := json.Unmarshal(out.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		walk("", v)
	}
	c := contract{}
	for path, keys := range seen {
		c[path] = map[string]bool{}
		for k, n := range keys {
			c[path][k] = n < count[path]
		}
	}
	return c
}

// TestReadmeJSONContract keeps docs/discovery.md's quoted key list equal to
// the types' json tags, and to what `device-plugin discover -o json` prints on
// the built-in sample nodes: every listed key appears, every printed key is
// listed, and a key not marked optional is in every object.
func TestReadmeJSONContract(t *testing.T) {
	readme := readmeContract(t)
	if diff := cmp.Diff(codeContract(), readme); diff != "" {
		t.Errorf("docs/discovery.md JSON key list vs the json tags of discovery.Node (true: optional) (-code +docs):\n%s", diff)
	}
	out := outputContract(t)
	for path, keys := range readme {
		for k, optional := range keys {
			seenOptional, seen := out[path][k]
			switch {
			case !seen:
				t.Errorf("docs/discovery.md lists %s.%s; no sample node's discover -o json has it", path, k)
			case seenOptional && !optional:
				t.Errorf("docs/discovery.md lists %s.%s as always present; some objects lack it", path, k)
			}
		}
	}
	for path, keys := range out {
		for k := range keys {
			if _, ok := readme[path][k]; !ok {
				t.Errorf("discover -o json prints %s.%s; docs/discovery.md does not list it", path, k)
			}
		}
	}
}
