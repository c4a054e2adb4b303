package nodewatch

import (
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

func syntheticWatcher(b *testing.B) *Watcher {
	tree, err := nodesim.Build(b.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		b.Fatal(err)
	}
	w := New(Config{Scanner: discovery.Scanner{SysRoot: tree.SysRoot}})
	if err := w.Scan(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.states.Close)
	return w
}

// BenchmarkTick is one idle tick on the 1,024-device node: presence plus
// every port state, nothing changed.
func BenchmarkTick(b *testing.B) {
	w := syntheticWatcher(b)
	gen := w.cur.Gen
	b.ReportAllocs()
	for b.Loop() {
		w.refresh(time.Now(), gidRequest{})
	}
	if w.cur.Gen != gen {
		b.Fatal("an idle tick published")
	}
}

// BenchmarkRereadGIDs is one tick that also re-reads every device's ports
// and GID tables, as an address event or every DefaultGIDEvery-th tick does.
func BenchmarkRereadGIDs(b *testing.B) {
	w := syntheticWatcher(b)
	b.ReportAllocs()
	for b.Loop() {
		w.refresh(time.Now(), gidRequest{all: true})
	}
}
