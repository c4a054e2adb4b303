package kubectlrdma

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

// decodeStrict decodes JSON or YAML into v, refusing unknown fields.
func decodeStrict(t *testing.T, format, data string, v any) {
	t.Helper()
	b := []byte(data)
	if format == outYAML {
		var err error
		if b, err = yaml.YAMLToJSONStrict(b); err != nil {
			t.Fatalf("yaml: %v\n%s", err, data)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s does not decode into %T: %v\n%s", format, v, err, data)
	}
}

// -o json and -o yaml decode back into the API types (nodes, topo) and the
// plugin's own list types (pods, doctor), equal to what was seeded.
func TestSchema(t *testing.T) {
	w := newWorld(t)
	f := &fakeCluster{w: w}
	for _, format := range []string{outJSON, outYAML} {
		t.Run(format, func(t *testing.T) {
			out, errOut, code := run(f, "nodes", "-o", format)
			var l v1alpha1.RDMANodeStateList
			decodeStrict(t, format, out, &l)
			if code != 0 || errOut != "" || l.Kind != "RDMANodeStateList" || l.APIVersion != "rdma.kube-rdma.io/v1alpha1" || len(l.Items) != len(w.states) {
				t.Fatalf("nodes -o %s: exit %d, %q, kind %q/%q, %d items", format, code, errOut, l.APIVersion, l.Kind, len(l.Items))
			}
			seeded := map[string]v1alpha1.RDMANodeStateStatus{}
			for _, s := range w.states {
				seeded[s.Name] = s.Status
			}
			for _, s := range l.Items {
				if diff := cmp.Diff(seeded[s.Name], s.Status); diff != "" || s.Kind != "RDMANodeState" {
					t.Errorf("item %s %s (-seeded +printed):\n%s", s.Name, s.Kind, diff)
				}
			}
			out, _, code = run(f, "topo", "hgx-1", "-o", format)
			var s v1alpha1.RDMANodeState
			decodeStrict(t, format, out, &s)
			if diff := cmp.Diff(w.states[0].Status, s.Status); code != 0 || diff != "" {
				t.Errorf("topo -o %s: exit %d (-seeded +printed):\n%s", format, code, diff)
			}
			out, _, code = run(f, "pods", "-A", "-o", format)
			var pods PodAllocationList
			decodeStrict(t, format, out, &pods)
			if code != 0 || len(pods.Items) != 10 || pods.Items[7].Pod != "worker-0" || pods.Items[7].WorstLevel != string(discovery.NODE) ||
				len(pods.Items[7].GPUs) != 2 || pods.Items[7].NICs[0] != (NIC{Name: "mlx5_0", Netdev: "ibp24s0", PCIAddress: "0000:18:00.0", Resource: ibRes}) ||
				pods.Items[6].Pod != "vf-0" || pods.Items[6].NICs[0].PodNetdev != "net1" ||
				pods.Items[2].Pod != "dra-0" || !slices.Equal(pods.Items[2].Claims, []string{"roce-a"}) || len(pods.Items[2].Resources) != 0 ||
				pods.Items[2].NICs[0] != (NIC{Name: "mlx5_2", Netdev: "enp28s0np0", PCIAddress: "0000:1c:00.0", Claim: "roce-a"}) {
				t.Errorf("pods -o %s: exit %d, %+v", format, code, pods.Items)
			}
			out, _, code = run(f, "doctor", "node/hgx-1", "-o", format)
			var r DoctorReport
			decodeStrict(t, format, out, &r)
			if code != 1 || r.Target != "node/hgx-1" || count(r.Checks, Fail) != 1 || r.Checks[5].Fix == "" {
				t.Errorf("doctor -o %s: exit %d, %+v", format, code, r)
			}
		})
	}
	out, _, _ := run(f, "pods", "-n", "nowhere", "-o", "json")
	if out != "{\n  \"items\": []\n}\n" {
		t.Errorf("empty pods list: %q", out)
	}
}
