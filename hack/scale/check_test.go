package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"
)

func TestViolations(t *testing.T) {
	good := func() Result {
		return Result{
			Steady: map[string]float64{"leases": 0.5},
			Storm: Storm{Flaps: 75, PerFlappingNodeMinute: map[string]float64{
				"leases": 0.5, "rdmanodestates/status": 17.9, "resourceslices": 23.9}},
			Sched: []Sched{{Claim: "aligned", Pods: 60, Scheduled: 60, Aligned: 1},
				{Claim: "unaligned", Pods: 60, Scheduled: 58, Aligned: 0.9},
				{Claim: "prioritized", Pods: 60, Scheduled: 60, Aligned: 0.75, Fallback: ptr.To(0.25)}},
			ClaimWatch: &ClaimWatch{Nodes: 50, ClaimsPerNode: 8, SteadyPerMin: map[string]float64{"LIST": 0, "WATCH": 0.2, "GET": 0}},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*Result)
		want   []string
	}{
		{"healthy run", func(*Result) {}, nil},
		{"steady write", func(r *Result) { r.Steady["rdmanodestates/status"] = 0.02; r.SteadyPublisherWrites = 1 },
			[]string{"steady state: the publishers wrote 1 times, want 0",
				"steady state: rdmanodestates/status 0.0200 writes per node per minute, want 0"}},
		{"slices over their pace", func(r *Result) { r.Storm.PerFlappingNodeMinute["resourceslices"] = 60 },
			[]string{"storm: resourceslices 60.00 writes per flapping node per minute, over the writers' bound 32"}},
		{"no storm", func(r *Result) { r.Storm = Storm{} }, []string{"storm: no port flapped"}},
		{"misaligned", func(r *Result) { r.Sched[0].Aligned, r.Sched[0].Scheduled = 0.95, 59 },
			[]string{"aligned claims: 59 of 60 pods scheduled",
				"aligned claims: 95.0% of the NICs under their GPU's switch, want 100%"}},
		{"prioritized first choice off its switch", func(r *Result) { r.Sched[2].Aligned, r.Sched[2].Scheduled = 0.7, 59 },
			[]string{"prioritized claims: 59 of 60 pods scheduled",
				"prioritized claims: 70.0% under their GPU's switch and 0.25 fell back: a first choice not under the switch"}},
		{"claim reconciler polling", func(r *Result) { r.ClaimWatch.SteadyPerMin["GET"] = 16 },
			[]string{"steady state: the DRA claim reconciler made 16.2000 reads per node per minute, want at most 1"}},
		{"claim reconciler writing", func(r *Result) { r.ClaimWatch.SteadyPerMin["PATCH"] = 0.5 },
			[]string{"steady state: the DRA claim reconciler made 0.5000 writes per node per minute, want 0"}},
		{"nodes not ready", func(r *Result) { r.NotReadyAfter = 3 },
			[]string{"0 nodes NotReady after the steady state, 3 before scheduling"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good()
			tc.change(&r)
			if diff := cmp.Diff(tc.want, r.violations()); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}
