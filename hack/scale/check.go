package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Bounds that hold on any machine, however slow (-check): what the
// publishers and the slice writer ask of the API server does not depend on
// its speed, and alignment is the scheduler's answer, not its pace.
const (
	// The publisher writes at most once per interval (2 s) and the DRA
	// pacer at most once per 2 s plus the first change at once: 30 a
	// minute each, a little over for the window's edges. The pacer's
	// urgent call for a port going down (at most one per interval) does
	// not add to it for a port that flaps once a second: each down comes
	// when the paced call is due anyway (dra.Pacer).
	stormWritesMax = 32
	// The DRA claim reconciler holds a watch per prepared claim: in a
	// steady state a node's claims cost at most one read a minute (a
	// watch the API server ends, after 30-60 min, is made again).
	claimReadsMax = 1
)

// violations lists what r shows that the product must never do: writes in a
// steady state, writers over their interval in a storm, an aligned claim
// whose NIC is not under its GPU's switch or that was not scheduled, and a
// run whose simulated nodes went NotReady (its figures would not be of a
// healthy cluster). None: nil.
func (r Result) violations() []string {
	var v []string
	if r.NotReady > 0 || r.NotReadyAfter > 0 {
		v = append(v, fmt.Sprintf("%d nodes NotReady after the steady state, %d before scheduling", r.NotReady, r.NotReadyAfter))
	}
	if r.SteadyPublisherWrites != 0 {
		v = append(v, fmt.Sprintf("steady state: the publishers wrote %d times, want 0", r.SteadyPublisherWrites))
	}
	for _, k := range slices.Sorted(maps.Keys(r.Steady)) {
		if w := r.Steady[k]; ours(k) && w != 0 {
			v = append(v, fmt.Sprintf("steady state: %s %.4f writes per node per minute, want 0", k, w))
		}
	}
	if cw := r.ClaimWatch; cw != nil {
		if w := cw.writes(); w != 0 {
			v = append(v, fmt.Sprintf("steady state: the DRA claim reconciler made %.4f writes per node per minute, want 0", w))
		}
		if rd := cw.reads(); rd > claimReadsMax {
			v = append(v, fmt.Sprintf("steady state: the DRA claim reconciler made %.4f reads per node per minute, want at most %d", rd, claimReadsMax))
		}
	}
	if r.Storm.Flaps == 0 {
		v = append(v, "storm: no port flapped")
	}
	for _, k := range slices.Sorted(maps.Keys(r.Storm.PerFlappingNodeMinute)) {
		if w := r.Storm.PerFlappingNodeMinute[k]; ours(k) && w > stormWritesMax {
			v = append(v, fmt.Sprintf("storm: %s %.2f writes per flapping node per minute, over the writers' bound %d", k, w, stormWritesMax))
		}
	}
	for _, s := range r.Sched {
		switch s.Claim {
		case claimAligned:
			if s.Scheduled != s.Pods {
				v = append(v, fmt.Sprintf("aligned claims: %d of %d pods scheduled", s.Scheduled, s.Pods))
			}
			if s.Aligned != 1 {
				v = append(v, fmt.Sprintf("aligned claims: %.1f%% of the NICs under their GPU's switch, want 100%%", 100*s.Aligned))
			}
		case claimPrioritized:
			// Every claim can be placed (the last choice is any NIC), and
			// one that got its first choice has its NIC under its GPU's
			// switch.
			if s.Scheduled != s.Pods {
				v = append(v, fmt.Sprintf("prioritized claims: %d of %d pods scheduled", s.Scheduled, s.Pods))
			}
			if s.Fallback == nil {
				v = append(v, "prioritized claims: no fallback share measured")
			} else if s.Aligned+*s.Fallback < 1-1e-9 {
				v = append(v, fmt.Sprintf("prioritized claims: %.1f%% under their GPU's switch and %.2f fell back: a first choice not under the switch", 100*s.Aligned, *s.Fallback))
			}
		}
	}
	return v
}

// ours says whether resource k (as apiserver_request_total names it) is
// written by kube-rdma: RDMANodeStates and our ResourceSlices.
func ours(k string) bool {
	return strings.HasPrefix(k, "rdmanodestates") || strings.HasPrefix(k, "resourceslices")
}
