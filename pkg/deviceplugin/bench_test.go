package deviceplugin

import (
	"testing"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
)

// BenchmarkIdleTick is one idle health tick on the 1,024-device node:
// presence plus every port state.
func BenchmarkIdleTick(b *testing.B) {
	tree, err := nodesim.Build(b.TempDir(), nodesim.Synthetic(8, 16, 63))
	if err != nil {
		b.Fatal(err)
	}
	node, err := discovery.Scanner{SysRoot: tree.SysRoot}.Scan()
	if err != nil {
		b.Fatal(err)
	}
	h := healthReader{sysRoot: tree.SysRoot}
	h.reset(portsOf(node.RDMADevices))
	defer h.close()
	for b.Loop() {
		if _, err := readPresence(tree.SysRoot); err != nil {
			b.Fatal(err)
		}
		if health, gone := h.read(); gone || len(health) != 1024 {
			b.Fatalf("gone %v, %d devices", gone, len(health))
		}
	}
}
