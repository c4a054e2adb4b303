package helm

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// policyNames lists the rendered ValidatingAdmissionPolicies with the policy each binding binds.
func policyNames(t *testing.T, objs []object) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, o := range objs {
		switch o.Kind {
		case "ValidatingAdmissionPolicy":
			if _, ok := got[o.Metadata.Name]; !ok {
				got[o.Metadata.Name] = ""
			}
		case "ValidatingAdmissionPolicyBinding":
			var spec struct {
				PolicyName        string   `json:"policyName"`
				ValidationActions []string `json:"validationActions"`
			}
			if err := json.Unmarshal(o.Spec, &spec); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"Deny"}, spec.ValidationActions); diff != "" {
				t.Errorf("binding %s validationActions (-want +got):\n%s", o.Metadata.Name, diff)
			}
			got[spec.PolicyName] = o.Metadata.Name
		}
	}
	return got
}

// TestAdmissionPolicyValues: one policy and its binding per kind of object the daemon writes
// (TestAdmissionPolicyAgainstAPIServer shows what they admit), none without API access or with
// admissionPolicy.enabled=false, and each matches the chart's service account only.
func TestAdmissionPolicyValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want map[string]string
	}{
		{"defaults: node state", nil, map[string]string{"rdma-kube-rdma-rdmanodestates": "rdma-kube-rdma-rdmanodestates"}},
		{"dra", []string{"--set", "dra.enabled=true"}, map[string]string{
			"rdma-kube-rdma-rdmanodestates": "rdma-kube-rdma-rdmanodestates",
			"rdma-kube-rdma-resourceslices": "rdma-kube-rdma-resourceslices"}},
		{"dra without node state", []string{"--set", "dra.enabled=true,nodeState.enabled=false"},
			map[string]string{"rdma-kube-rdma-resourceslices": "rdma-kube-rdma-resourceslices"}},
		{"no API access", []string{"--set", "nodeState.enabled=false"}, map[string]string{}},
		{"turned off", []string{"--set", "dra.enabled=true,admissionPolicy.enabled=false"}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, tc.args...)
			if diff := cmp.Diff(tc.want, policyNames(t, objs)); diff != "" {
				t.Errorf("policy -> binding (-want +got):\n%s", diff)
			}
			for _, o := range objs {
				if o.Kind != "ValidatingAdmissionPolicy" {
					continue
				}
				var spec struct {
					FailurePolicy   string `json:"failurePolicy"`
					MatchConditions []struct {
						Expression string `json:"expression"`
					} `json:"matchConditions"`
				}
				if err := json.Unmarshal(o.Spec, &spec); err != nil {
					t.Fatal(err)
				}
				if spec.FailurePolicy != "Fail" {
					t.Errorf("%s: failurePolicy %q, want Fail", o.Metadata.Name, spec.FailurePolicy)
				}
				want := `request.userInfo.username == "system:serviceaccount:kube-rdma:rdma-kube-rdma"`
				if len(spec.MatchConditions) != 1 || spec.MatchConditions[0].Expression != want {
					t.Errorf("%s: matchConditions %+v, want the chart's service account only", o.Metadata.Name, spec.MatchConditions)
				}
			}
		})
	}
}
