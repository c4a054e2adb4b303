package nodestate

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStatusApply: the apply configuration carries exactly the status Build
// made, zero fields it sets included, nothing it omits.
func TestStatusApply(t *testing.T) {
	st := Build(Input{View: testView(), CNIMode: "chained", DaemonVersion: "v-test", Now: time.Unix(1700000000, 0)})
	ac, err := statusApply("n1", &st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *ac.Name != "n1" || *ac.Kind != "RDMANodeState" || *ac.APIVersion != "rdma.kube-rdma.io/v1alpha1" || ac.Spec != nil {
		t.Errorf("object %s %s/%s spec %v, want n1 RDMANodeState rdma.kube-rdma.io/v1alpha1, no spec", *ac.Name, *ac.APIVersion, *ac.Kind, ac.Spec)
	}
	want, got := asMap(t, st), asMap(t, ac.Status)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("applied status (-built +applied):\n%s", diff)
	}
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}
