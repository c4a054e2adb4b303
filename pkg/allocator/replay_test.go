package allocator

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
)

const replaySeed = 11

// TestPolicyReplay replays a fixed-seed pod sequence on each golden node:
// AlignToGPUs reaches the best achievable number of PIX pairs and of PXB
// or closer pairs on every pod, and no policy binds a NIC twice (replay
// fails if one does).
func TestPolicyReplay(t *testing.T) {
	for _, node := range replayNodes() {
		t.Run(node.name, func(t *testing.T) {
			trace := podTrace(replaySeed, node, 2000)
			scores, err := replayAll(node, trace, replaySeed)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range scores[0] {
				if s.pix != s.bestPIX || s.pxb != s.bestPXB {
					t.Errorf("pod %d: ours %d PIX, %d PXB or closer; best %d, %d", s.pod, s.pix, s.pxb, s.bestPIX, s.bestPXB)
				}
			}
			for i, p := range replayPolicies {
				if len(scores[i]) != len(scores[0]) {
					t.Errorf("%s scored %d pods, ours %d: not the same sequence", p.name, len(scores[i]), len(scores[0]))
				}
				for _, s := range scores[i] {
					if s.pix > s.bestPIX || s.pxb > s.bestPXB || s.pxb > s.pairs {
						t.Errorf("%s pod %d: %+v beats the best", p.name, s.pod, s)
					}
				}
			}
			if tot := replayTotal(scores[0]); tot.pairs == 0 {
				t.Errorf("no pairs replayed")
			}
		})
	}
}

// TestPodTrace: the same seed gives the same sequence, GPUs are never
// given twice and NIC counts stay within the pool.
func TestPodTrace(t *testing.T) {
	for _, node := range replayNodes() {
		a, b := podTrace(replaySeed, node, 500), podTrace(replaySeed, node, 500)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("%s: same seed, different traces", node.name)
		}
		used := map[int]bool{}
		held := map[int]event{}
		nics := 0
		for _, e := range a {
			if e.gpus == nil {
				for _, g := range held[e.pod].gpus {
					delete(used, g)
				}
				nics -= held[e.pod].nics
				continue
			}
			if len(e.gpus) < 1 || len(e.gpus) > 8 || e.nics > len(e.gpus) {
				t.Errorf("%s pod %d: %d GPUs, %d NICs", node.name, e.pod, len(e.gpus), e.nics)
			}
			for _, g := range e.gpus {
				if used[g] {
					t.Fatalf("%s pod %d: GPU %d given twice", node.name, e.pod, g)
				}
				used[g] = true
			}
			held[e.pod] = e
			if nics += e.nics; nics > len(node.pool) {
				t.Fatalf("%s pod %d: %d NICs held, pool has %d", node.name, e.pod, nics, len(node.pool))
			}
		}
	}
}

// TestMaxPairs checks the best-achievable count against exhaustive search
// over every partial pairing on random small nodes.
func TestMaxPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	for iter := range 2000 {
		topo, gpus := randomNode(rng, 1+rng.IntN(4), 1+rng.IntN(5))
		nics := ids(topo)
		for _, l := range discovery.Levels {
			want := 0
			used := make([]bool, len(nics))
			var walk func(g, n int)
			walk = func(g, n int) {
				if g == len(gpus) {
					want = max(want, n)
					return
				}
				walk(g+1, n)
				for j, id := range nics {
					if !used[j] && discovery.Distance(gpus[g], nicLocation(topo, id), topo.NUMANodes).Rank() <= l.Rank() {
						used[j] = true
						walk(g+1, n+1)
						used[j] = false
					}
				}
			}
			walk(0, 0)
			if got := maxPairs(topo, gpus, nics, l); got != want {
				t.Fatalf("iteration %d, level %s: maxPairs %d, exhaustive %d", iter, l, got, want)
			}
		}
	}
}

// BenchmarkPolicyReplay replays 20000 steps on each golden node and prints,
// per policy, the GPU<->NIC pairs, the share at PIX and at PXB or closer,
// and the share of the best achievable (each policy against the NICs free
// for it at each pod, so a policy that strands NICs is not blamed twice);
// the same figures go out as metrics, computed in this run. Run with
// go test -run XXX -bench PolicyReplay -benchtime 1x ./pkg/allocator/
func BenchmarkPolicyReplay(b *testing.B) {
	for _, node := range replayNodes() {
		b.Run(node.name, func(b *testing.B) {
			trace := podTrace(replaySeed, node, 20000)
			var scores [][]podScore
			for b.Loop() {
				var err error
				if scores, err = replayAll(node, trace, replaySeed); err != nil {
					b.Fatal(err)
				}
			}
			var tab strings.Builder
			fmt.Fprintf(&tab, "%s: %d pods with NICs, same pod/GPU sequence for every policy\n", node.name, len(scores[0]))
			fmt.Fprintf(&tab, "%-20s %7s %7s %8s %10s %12s\n", "policy", "pairs", "%PIX", "%<=PXB", "%best PIX", "%best <=PXB")
			share := func(a, b int) string { // "-" when nothing was achievable
				if b == 0 {
					return "-"
				}
				return fmt.Sprintf("%.1f", pct(a, b))
			}
			for i, p := range replayPolicies {
				tot := replayTotal(scores[i])
				fmt.Fprintf(&tab, "%-20s %7d %7.1f %8.1f %10s %12s\n", p.name, tot.pairs,
					pct(tot.pix, tot.pairs), pct(tot.pxb, tot.pairs), share(tot.pix, tot.bestPIX), share(tot.pxb, tot.bestPXB))
				short := []string{"ours", "numa", "root"}[i]
				b.ReportMetric(pct(tot.pix, tot.pairs), "pct_pix_"+short)
				b.ReportMetric(pct(tot.pxb, tot.pairs), "pct_pxb_"+short)
				b.ReportMetric(pct(tot.pxb, tot.bestPXB), "pct_best_pxb_"+short)
			}
			b.Log("\n" + tab.String())
		})
	}
}
