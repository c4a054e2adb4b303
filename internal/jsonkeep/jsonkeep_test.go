package jsonkeep

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type inner struct {
	C string `json:"c,omitempty"`
}

type rec struct {
	inner
	A     string   `json:"a"`
	B     []string `json:"b,omitempty"`
	Plain int
	Skip  int `json:"-"`
	lower int
}

func TestKeys(t *testing.T) {
	want := map[string]bool{"a": true, "b": true, "c": true, "Plain": true}
	if diff := cmp.Diff(want, Keys(reflect.TypeFor[rec]())); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	_ = rec{}.lower
}

func TestSplitMerge(t *testing.T) {
	in := []byte(`{"a":"x","b":["y"],"c":"z","plain":3,"new":{"k":[1,2]},"Skip":9,"zz":null}`)
	u := Split(in, reflect.TypeFor[rec]())
	// "plain" is Plain (encoding/json matches keys case-insensitively);
	// "Skip" is json:"-", so this struct never writes it: kept.
	want := Unknown{"new": json.RawMessage(`{"k":[1,2]}`), "Skip": json.RawMessage(`9`), "zz": json.RawMessage(`null`)}
	if diff := cmp.Diff(want, u); diff != "" {
		t.Fatalf("unknown (-want +got):\n%s", diff)
	}
	// The struct cleared b: it stays cleared; the unknown keys come back.
	out, err := Merge([]byte(`{"a":"x","c":"z","Plain":3}`), u)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), `{"a":"x","c":"z","Plain":3,"Skip":9,"new":{"k":[1,2]},"zz":null}`; got != want {
		t.Errorf("merged %s, want %s", got, want)
	}
	// A key the struct wrote wins over one read.
	out, _ = Merge([]byte(`{"new":1}`), u)
	if got, want := string(out), `{"new":1,"Skip":9,"zz":null}`; got != want {
		t.Errorf("merged %s, want %s", got, want)
	}
	if out, _ := Merge([]byte(`{}`), Unknown{"k": json.RawMessage(`1`)}); string(out) != `{"k":1}` {
		t.Errorf("into an empty object: %s", out)
	}
	if out, _ := Merge([]byte(`{"a":1}`), nil); string(out) != `{"a":1}` {
		t.Errorf("nothing to merge: %s", out)
	}
	if _, err := Merge([]byte(`[1]`), Unknown{"k": json.RawMessage(`1`)}); err == nil {
		t.Error("merge into an array: no error")
	}
	if Split([]byte(`[1]`), reflect.TypeFor[rec]()) != nil || Split([]byte(`{"a":"x"}`), reflect.TypeFor[rec]()) != nil {
		t.Error("Split of a non-object or of known keys only is not nil")
	}
}

// TestSplitStableThroughMarshal: a value holding what encoding/json escapes
// (<, >, &, U+2028) reads back as the same bytes once a struct carrying it
// is written with json.Marshal, as a record is saved.
func TestSplitStableThroughMarshal(t *testing.T) {
	in := []byte("{\"a\":\"x\",\"new\":{\"s\":\"a>b<c&d\u2028\", \"n\": [1, 2]}}")
	u := Split(in, reflect.TypeFor[rec]())
	var v struct {
		A string `json:"a"`
		N json.RawMessage
	}
	v.N, _ = Merge([]byte(`{"a":"x"}`), u)
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	var back struct{ N json.RawMessage }
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	again := Split(back.N, reflect.TypeFor[rec]())
	if diff := cmp.Diff(u, again); diff != "" {
		t.Errorf("unknown keys written and read back (-read +again):\n%s", diff)
	}
	var val map[string]any
	if err := json.Unmarshal(u["new"], &val); err != nil || val["s"] != "a>b<c&d\u2028" {
		t.Errorf("the kept value changed: %s (%v)", u["new"], err)
	}
}
