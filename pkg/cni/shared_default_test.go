package cni

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/contractver"
	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

// previousReader is the attachment reader of the release before child
// netdevs: schema 1 only (its format's first and current), a newer one
// refused by name. A rollback of the CNI plugin reads this node's records
// with it.
var previousReader = contractver.Format{Kind: "attachment record", Key: "schema", First: 1, Current: attachment.VersionMoved}

// requireRollbackReadable checks every record in dir as the previous
// release would read it: schema 1, no device with a child.
func requireRollbackReadable(t *testing.T, dir string) int {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := previousReader.Check(path, b); err != nil || v != attachment.VersionMoved {
			t.Errorf("the previous release's reader on %s: version %d, %v; want schema 1 read\n%s", path, v, err, b)
		}
		var rec struct {
			Devices []map[string]json.RawMessage `json:"devices"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("decode %s: %v", path, err)
		}
		for _, d := range rec.Devices {
			if _, ok := d["child"]; ok {
				t.Errorf("%s: a device with a child in a record the previous release reads as a moved netdev:\n%s", path, b)
			}
		}
	}
	return len(paths)
}

// TestSharedDefaultNone: a netconf without sharedNetdev (the default in
// this release is none) gives a shared pool's pod nothing of the plugin,
// as before child netdevs: chained (resourceName) or through Multus (a
// slot, or a NIC of a slot the pod holds) the ADD passes through, no link
// moves or appears and no record is written. The same pod's NIC of an
// exclusive pool is moved as always, in a schema 1 record, which the
// previous release's reader accepts: a rollback of the plugin is safe
// while sharedNetdev is unset (docs/upgrades.md).
func TestSharedDefaultNone(t *testing.T) {
	e := newEnv(t, 2, false, "shared")
	e.writePools(nodepools.File{Pools: []nodepools.Pool{
		{Name: "roce", Mode: nodepools.ModeShared, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_0", PCIAddress: pciAddr(0)}}},
		{Name: "excl", Mode: nodepools.ModeExclusive, Frontend: "devicePlugin", Devices: []nodepools.Device{{RDMA: "mlx5_1", PCIAddress: pciAddr(1)}}},
	}})
	e.socket = podrestest.Start(t, podrestest.Pod{Namespace: "ns", Name: "a", Devices: map[string][]string{
		"rdma.kube-rdma.io/roce": {nodepools.SlotID("roce", 0)}, "rdma.kube-rdma.io/excl": {"mlx5_1"}}}).Socket
	pod := netnstest.New(t)
	before := e.snapshot(pod)

	for _, tc := range []struct{ name, ifName, conf string }{
		{"chained on the shared pool", "eth0", `"resourceName":"rdma.kube-rdma.io/roce"`},
		{"multus, the pool's slot", "net1", `"runtimeConfig":{"deviceID":"` + nodepools.SlotID("roce", 0) + `"}`},
		{"multus, a NIC of a slot held", "net1", `"runtimeConfig":{"deviceID":"mlx5_0"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := args("c-"+tc.ifName, pod, tc.ifName, e.conf("1.1.0", tc.conf))
			a.Args = podArgsOf("a")
			if res := mustAdd(t, e, a); len(res.Interfaces) != 0 {
				t.Errorf("result %+v: want nothing attached", res.Interfaces)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("ADD with the default sharedNetdev changed something (-before +after):\n%s", diff)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Errorf("DEL: %v", err)
			}
		})
	}

	// The exclusive NIC of the same pod: a moved netdev, schema 1.
	moved := args("c-move", pod, "net2", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`))
	moved.Args = podArgsOf("a")
	mustAdd(t, e, moved)
	if n := requireRollbackReadable(t, e.stateDir); n != 1 {
		t.Errorf("%d records, want the moved NIC's", n)
	}
	b, err := os.ReadFile(filepath.Join(e.stateDir, "c-move_net2.json"))
	if err != nil || !strings.Contains(string(b), `"schema": 1,`) {
		t.Errorf("the moved NIC's record (%v):\n%s", err, b)
	}
	if err := e.p.Del(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
		t.Errorf("after DEL (-before +after):\n%s", diff)
	}
}

// TestSharedOptInSchema2: sharedNetdev macvlan (the opt-in) writes the
// child's record as schema 2, which the previous release's reader refuses
// by name (contractver.ErrNewer with the remedy) rather than take the child
// for a moved netdev; the current reader reads it.
func TestSharedOptInSchema2(t *testing.T) {
	e := sharedEnv(t, 1, "a")
	pod := netnstest.New(t)
	a := args("c1", pod, "eth0", e.conf("1.1.0", `"resourceName":"rdma.kube-rdma.io/roce","sharedNetdev":"macvlan"`))
	a.Args = podArgsOf("a")
	mustAdd(t, e, a)
	path := filepath.Join(e.stateDir, "c1_eth0.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := previousReader.Check(path, b); v != attachment.Version || !errors.Is(err, contractver.ErrNewer) ||
		!strings.Contains(err.Error(), contractver.Remedy) {
		t.Errorf("the previous release's reader on a child record: version %d, %v; want schema 2 refused with the remedy", v, err)
	}
	rec, err := attachment.Store{Dir: e.stateDir, BootID: "test-boot"}.Load(attachment.Key{ContainerID: "c1", IfName: "eth0"})
	if err != nil || rec.Schema != attachment.Version || len(rec.Devices) != 1 || rec.Devices[0].Child != "macvlan" {
		t.Errorf("Load = %+v, %v; want schema 2 with a macvlan child", rec, err)
	}
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatal(err)
	}
}
