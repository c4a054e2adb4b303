package suite

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

const quarantinedPoolFiles = `kube_rdma_device_plugin_quarantined_files{kind="pool"}`

// testFaultTornPoolFile (phase gpu-aligned): the gpuAligned pool's pool file
// (<alloc-dir>/<pool>/pool.json, which the CNI plugin reads to bind a pod's slots to the
// NICs on its GPUs' switches) is cut in half on disk under a running pod of the pool, then a
// new pod of the pool is created. Its ADD moves the torn file to <alloc-dir>/_quarantine/
// with its bytes and fails with 11 (try again), the daemon writes the file again from what it
// serves (within the agent's files interval, 10 s), the kubelet's next sandbox for the pod
// gets its NIC; the running pod is untouched; the gauge counts the file. Then fault.check.
func testFaultTornPoolFile(t *testing.T, e *env) {
	if e.gpuAligned == nil || e.faults == nil || e.faults.allocDir == "" {
		t.Skip("the phase has no gpuAligned pool or no alloc dir")
	}
	c, g := e.faults, e.gpuAligned
	if len(g.nics) < 2 {
		t.Skipf("the fixture has %d GPU/NIC pairs: the fault needs one for the running pod and one for the new", len(g.nics))
	}
	k := e.alignedKind(g)
	f := e.beginFaultOf(t, "torn pool file", k)
	path := filepath.Join(c.allocDir, g.pool, "pool.json")
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the pool file of %s: %v", g.pool, err)
	}
	cut := orig[:len(orig)/2]
	if err := os.WriteFile(path, cut, 0o644); err != nil {
		t.Fatal(err)
	}
	tornAt := time.Now()
	if err := f.createKind(t.Context(), "after-torn-"+dnsName(g.pool), k); err != nil {
		t.Fatal(err)
	}
	moved, err := waitQuarantined(t.Context(), filepath.Join(c.allocDir, "_quarantine", g.pool+".pool.json.*"), cut)
	if err != nil {
		t.Fatal(err)
	}
	movedIn := time.Since(tornAt)
	if err := waitWrittenAgain(t.Context(), path, orig); err != nil {
		t.Error(err)
	}
	restoredIn := time.Since(tornAt)
	gauge, err := e.waitGauge(t.Context(), quarantinedPoolFiles)
	if err != nil {
		t.Error(err)
	}
	removeQuarantined(t, moved)
	f.healed = tornAt
	out := f.check(t)
	f.report(t, fmt.Sprintf("the gpuAligned pool's pool.json cut in half: moved to _quarantine/ %.1f s after (by the next ADD, which failed with 11: try again), written again by the daemon %.1f s after the tear, %s = %v",
		movedIn.Seconds(), restoredIn.Seconds(), quarantinedPoolFiles, gauge), out)
}
