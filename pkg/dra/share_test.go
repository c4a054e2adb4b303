package dra_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
)

func qty(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }

// TestShareDevices: a shared pool's devices are published for several
// claims (allowMultipleAllocations) with the capacity kube-rdma.io/shares
// of the pool's slots, 1 consumed by default, 1..slots in steps of 1 on
// request; their attributes and taints are those of an exclusive pool's.
func TestShareDevices(t *testing.T) {
	_, node := scan(t, nodesim.PortDown())
	for _, tc := range []struct {
		name   string
		shares int
	}{{"three", 3}, {"one", 1}, {"default slots", 100}} {
		t.Run(tc.name, func(t *testing.T) {
			devs, errs := dra.Devices(node.RDMADevices, health(node))
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			excl, _ := dra.Devices(node.RDMADevices, health(node))
			dra.Share(devs, tc.shares)
			n := int64(tc.shares)
			for i, d := range devs {
				want := excl[i].API
				yes := true
				want.AllowMultipleAllocations = &yes
				want.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"kube-rdma.io/shares": {Value: *qty(n), RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default: qty(1), ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: qty(1), Max: qty(n), Step: qty(1)}}},
				}
				if diff := cmp.Diff(want, d.API); diff != "" {
					t.Errorf("device %s (-want +got):\n%s", d.API.Name, diff)
				}
			}
		})
	}
}

// TestShareKeepsTheTaint: the port-down taint is on the shared device, so
// it applies to every claim that holds a share of it.
func TestShareKeepsTheTaint(t *testing.T) {
	_, node := scan(t, nodesim.PortDown())
	devs, _ := dra.Devices(node.RDMADevices, health(node))
	dra.Share(devs, 3)
	tainted := 0
	for _, d := range devs {
		if len(d.API.Taints) > 0 {
			tainted++
			if d.API.Taints[0].Key != dra.TaintPortDown || d.API.AllowMultipleAllocations == nil || !*d.API.AllowMultipleAllocations {
				t.Errorf("device %s: taints %v, allowMultipleAllocations %v", d.API.Name, d.API.Taints, d.API.AllowMultipleAllocations)
			}
		}
	}
	if tainted == 0 {
		t.Fatal("PortDown has no tainted device")
	}
}

// shareClaim is a claim holding a share of device dev.
func (f fixture) shareClaim(uid, dev, share string) dra.Claim {
	c := f.claim(uid, "nic:"+dev)
	c.Results[0].ShareID = share
	c.PodUIDs = []string{"pod-" + uid}
	return c
}

// TestPrepareShares: three claims holding shares of one NIC are prepared
// side by side, each with its own spec (the NIC's device nodes, NCCL's
// variables) and its own record carrying its shareID; a claim that wants
// the NIC alone is refused while shares are held, and a share is refused
// while a claim holds the NIC alone. Unpreparing one share leaves the
// others' specs and records as they were.
func TestPrepareShares(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	uids := []string{"uid-a", "uid-b", "uid-c"}
	for _, uid := range uids {
		out, err := p.Prepare(f.shareClaim(uid, "mlx5_0", "share-"+uid))
		if err != nil {
			t.Fatalf("share %s: %v", uid, err)
		}
		if len(out) != 1 || len(out[0].CDIDeviceIDs) != 1 {
			t.Fatalf("share %s prepared %+v", uid, out)
		}
		s, ok := f.spec(t, uid)
		if !ok || len(s.Devices) != 1 {
			t.Fatalf("share %s: spec %v %+v", uid, ok, s)
		}
		if diff := cmp.Diff(f.byRDMA["mlx5_0"].RDMA.CharDevices, nodes(s.Devices[0])); diff != "" {
			t.Errorf("share %s device nodes (-want +got):\n%s", uid, diff)
		}
		if diff := cmp.Diff(map[string]string{"NCCL_IB_HCA": "=mlx5_0", "UCX_NET_DEVICES": "mlx5_0:1"}, env(s.Devices[0])); diff != "" {
			t.Errorf("share %s env (-want +got):\n%s", uid, diff)
		}
	}
	if _, err := p.Prepare(f.claim("uid-alone", "nic:mlx5_0")); !errors.Is(err, dra.ErrInUse) {
		t.Errorf("the NIC alone while shared: %v, want ErrInUse", err)
	}
	if _, err := p.Prepare(f.claim("uid-x", "nic:mlx5_1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(f.shareClaim("uid-y", "mlx5_1", "share-y")); !errors.Is(err, dra.ErrInUse) {
		t.Errorf("a share of a NIC a claim holds alone: %v, want ErrInUse", err)
	}
	recs, err := p.Prepared()
	if err != nil {
		t.Fatal(err)
	}
	shares := map[string]string{}
	for _, r := range recs {
		for _, d := range r.Devices {
			shares[r.UID] = d.ShareID
		}
	}
	if diff := cmp.Diff(map[string]string{"uid-a": "share-uid-a", "uid-b": "share-uid-b", "uid-c": "share-uid-c", "uid-x": ""}, shares); diff != "" {
		t.Errorf("records' shareIDs (-want +got):\n%s", diff)
	}

	keep := map[string][]byte{}
	for _, uid := range []string{"uid-b", "uid-c"} {
		for _, path := range []string{filepath.Join(f.cdiDir, "kube-rdma-claim-"+uid+".json"), claimrecord.Path(f.stateDir, uid)} {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			keep[path] = b
		}
	}
	if err := p.Unprepare("uid-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.spec(t, "uid-a"); ok {
		t.Error("uid-a's spec is still there")
	}
	for path, b := range keep {
		now, err := os.ReadFile(path)
		if err != nil || string(now) != string(b) {
			t.Errorf("%s after another share's Unprepare: %v\n%s", path, err, now)
		}
	}
	// A share goes where one went.
	if _, err := p.Prepare(f.shareClaim("uid-d", "mlx5_0", "share-d")); err != nil {
		t.Errorf("a share after one went: %v", err)
	}
}
