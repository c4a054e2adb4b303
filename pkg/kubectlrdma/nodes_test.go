package kubectlrdma

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// nodes prints from the states' table and reads whole objects only for the
// states whose daemon did not publish the table's text: one get each for a
// few, one list for more than maxGets. Its output is the same either way.
func TestNodesReadsTheTable(t *testing.T) {
	golden := func(w *world) string {
		out, errOut, code := runWith((&fakeCluster{w: w}).newCluster, "nodes")
		if code != 0 || errOut != "" {
			t.Fatalf("nodes: exit %d, %q", code, errOut)
		}
		return out
	}
	w := newWorld(t)
	for i := range w.states {
		w.states[i].Status.Summary.Table = v1alpha1.NewSummaryTable(&w.states[i].Status)
	}
	want := golden(w)

	// Many nodes, every daemon current, then some old, then many old.
	for _, tc := range []struct {
		old, lists, gets int
	}{{0, 0, 0}, {3, 0, 3}, {maxGets + 1, 1, 0}} {
		t.Run(fmt.Sprintf("%d old daemons", tc.old), func(t *testing.T) {
			w := newWorld(t)
			base := w.states[0]
			for i := range 2 * maxGets {
				s := base.DeepCopy()
				s.Name = fmt.Sprintf("extra-%03d", i)
				s.Status.Summary.Table = v1alpha1.NewSummaryTable(&s.Status)
				if i < tc.old {
					s.Status.Summary.Table = nil
				}
				w.states = append(w.states, *s)
			}
			for i := range w.states[:3] {
				w.states[i].Status.Summary.Table = v1alpha1.NewSummaryTable(&w.states[i].Status)
			}
			f := &fakeCluster{w: w}
			out, errOut, code := runWith(f.newCluster, "nodes")
			if code != 0 || errOut != "" {
				t.Fatalf("nodes: exit %d, %q", code, errOut)
			}
			if f.lists != tc.lists || f.gets != tc.gets {
				t.Errorf("%d lists and %d gets of whole states, want %d and %d", f.lists, f.gets, tc.lists, tc.gets)
			}
			// The extra nodes' rows are hgx-1's under another name (node gone).
			lines := strings.Count(out, "\n")
			if lines != 1+len(w.nodes)+2*maxGets {
				t.Errorf("%d lines, want a header and %d rows:\n%s", lines, len(w.nodes)+2*maxGets, out)
			}
		})
	}

	// A state without the table text prints what its object says.
	w2 := newWorld(t)
	for i := range w2.states {
		w2.states[i].Status.Summary.Table = nil
	}
	if got := golden(w2); got != want {
		t.Errorf("from the objects:\n%s\nfrom the table:\n%s", got, want)
	}
	// A table that disagrees with the object is what the table says: nodes
	// does not read the objects it has the text of.
	w3 := newWorld(t)
	w3.states[0].Status.Summary.Table = &v1alpha1.SummaryTable{Pools: "from-table 1/1/1"}
	if got := golden(w3); !strings.Contains(got, "from-table 1/1/1") {
		t.Errorf("the published table's text is not what nodes printed:\n%s", got)
	}
}
