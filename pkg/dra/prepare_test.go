package dra_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/memlockhook"
)

const pool = "node-a/hca"

// fixture is the local node's devices published as one pool, and the
// directories a Preparer works in.
type fixture struct {
	ix                     *dra.Index
	byRDMA                 map[string]dra.Device
	cdiDir, stateDir, devs string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	_, node := scan(t, nodesim.LocalNode(2))
	devs, errs := dra.Devices(node.RDMADevices, health(node))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	f := fixture{ix: &dra.Index{}, byRDMA: map[string]dra.Device{}, cdiDir: filepath.Join(t.TempDir(), "cdi"),
		stateDir: filepath.Join(t.TempDir(), "claims"), devs: t.TempDir()}
	f.ix.Add(pool, devs)
	for _, d := range devs {
		f.byRDMA[d.RDMA.Name] = d
	}
	if err := os.MkdirAll(filepath.Join(f.devs, "infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.devs, "infiniband", "rdma_cm"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// preparer is a fresh Preparer on the fixture's directories, as after a
// restart of the daemon.
func (f fixture) preparer() *dra.Preparer {
	return &dra.Preparer{CDIDir: f.cdiDir, StateDir: f.stateDir, DevRoot: f.devs, Devices: f.ix}
}

func (f fixture) claim(uid string, reqDevs ...string) dra.Claim {
	c := dra.Claim{UID: uid, Namespace: "ns", Name: "claim-" + uid}
	for _, rd := range reqDevs {
		req, dev, _ := strings.Cut(rd, ":")
		c.Results = append(c.Results, dra.Result{Request: req, Pool: pool, Device: f.byRDMA[dev].API.Name})
	}
	return c
}

func (f fixture) spec(t *testing.T, uid string) (cdispec.Spec, bool) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(f.cdiDir, "kube-rdma-claim-"+uid+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return cdispec.Spec{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var s cdispec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s, true
}

// prepareSpec prepares a claim of results with p and returns the CDI spec
// it wrote.
func prepareSpec(t *testing.T, p *dra.Preparer, uid string, results []dra.Result) cdispec.Spec {
	t.Helper()
	if _, err := p.Prepare(dra.Claim{UID: uid, Namespace: "ns", Name: "c", Results: results}); err != nil {
		t.Fatal(err)
	}
	s, ok := fixture{cdiDir: p.CDIDir}.spec(t, uid)
	if !ok {
		t.Fatalf("claim %s: no CDI spec in %s", uid, p.CDIDir)
	}
	return s
}

func env(d cdispec.Device) map[string]string {
	m := map[string]string{}
	for _, e := range d.ContainerEdits.Env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

func nodes(d cdispec.Device) []string {
	var out []string
	for _, n := range d.ContainerEdits.DeviceNodes {
		out = append(out, n.Path)
	}
	return out
}

// TestPrepareWritesTheClaimsSpec: one CDI device per request with the
// device nodes of exactly that request's NICs, rdma_cm for all, and NCCL's
// variables computed once over the claim's NICs: a container that uses
// both requests gets one NCCL_IB_HCA naming all three, whichever CDI
// device the runtime applies last, and no GID index (the NICs are not all
// RoCE).
func TestPrepareWritesTheClaimsSpec(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	got, err := p.Prepare(f.claim("uid-1", "ib:mlx5_0", "ib:mlx5_1", "roce:mlx5_3"))
	if err != nil {
		t.Fatal(err)
	}
	want := []dra.Prepared{
		{Request: "ib", Pool: pool, Device: f.byRDMA["mlx5_0"].API.Name, CDIDeviceIDs: []string{"kube-rdma.io/claim=uid-1-ib"}},
		{Request: "ib", Pool: pool, Device: f.byRDMA["mlx5_1"].API.Name},
		{Request: "roce", Pool: pool, Device: f.byRDMA["mlx5_3"].API.Name, CDIDeviceIDs: []string{"kube-rdma.io/claim=uid-1-roce"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Prepare (-want +got):\n%s", diff)
	}
	spec, ok := f.spec(t, "uid-1")
	if !ok {
		t.Fatal("no spec written")
	}
	if spec.Kind != dra.CDIKind || len(spec.Devices) != 2 {
		t.Fatalf("spec kind %q with %d devices", spec.Kind, len(spec.Devices))
	}
	if diff := cmp.Diff([]string{"/dev/infiniband/rdma_cm"}, nodes(cdispec.Device{ContainerEdits: spec.ContainerEdits})); diff != "" {
		t.Errorf("spec-wide nodes (-want +got):\n%s", diff)
	}
	ib, roce := spec.Devices[0], spec.Devices[1]
	wantIB := append(slices.Clone(f.byRDMA["mlx5_0"].RDMA.CharDevices), f.byRDMA["mlx5_1"].RDMA.CharDevices...)
	if diff := cmp.Diff(wantIB, nodes(ib)); diff != "" || len(wantIB) == 0 {
		t.Errorf("ib request's nodes (-want +got):\n%s", diff)
	}
	claimEnv := map[string]string{"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_3", "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1,mlx5_3:1"}
	if diff := cmp.Diff(claimEnv, env(ib)); diff != "" {
		t.Errorf("ib request's env (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(f.byRDMA["mlx5_3"].RDMA.CharDevices, nodes(roce)); diff != "" {
		t.Errorf("roce request's nodes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(claimEnv, env(roce)); diff != "" {
		t.Errorf("roce request's env (-want +got):\n%s", diff)
	}
}

// TestPrepareClaimOfTwoPools: a claim with devices of an NCCL pool and of a
// pool with nccl: false. NCCL's variables name the NCCL pool's NICs only,
// no RoCE GID index reaches the InfiniBand HCA, and the other pool's
// request carries none. Two requests of RoCE NICs of the NCCL pool get
// their common GID index.
func TestPrepareClaimOfTwoPools(t *testing.T) {
	_, node := scan(t, nodesim.LocalNode(2))
	devs, errs := dra.Devices(node.RDMADevices, health(node))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	byRDMA := map[string]dra.Device{}
	var ib, vf []dra.Device
	for _, d := range devs {
		byRDMA[d.RDMA.Name] = d
		if d.RDMA.LinkLayer == "InfiniBand" {
			ib = append(ib, d)
		} else {
			vf = append(vf, d)
		}
	}
	devDir := t.TempDir()
	tests := []struct {
		name    string
		noNCCL  string // the pool with nccl: false
		results []dra.Result
		want    map[string]map[string]string // request -> env
	}{
		{"ib is NCCL's, vf is not", "n/vf",
			[]dra.Result{{Request: "ib", Pool: "n/ib", Device: byRDMA["mlx5_0"].API.Name}, {Request: "vf", Pool: "n/vf", Device: byRDMA["mlx5_3"].API.Name}},
			map[string]map[string]string{"ib": {"NCCL_IB_HCA": "=mlx5_0", "UCX_NET_DEVICES": "mlx5_0:1"}, "vf": {}}},
		{"one request spans both pools", "n/vf",
			[]dra.Result{{Request: "nics", Pool: "n/vf", Device: byRDMA["mlx5_3"].API.Name}, {Request: "nics", Pool: "n/ib", Device: byRDMA["mlx5_1"].API.Name}},
			map[string]map[string]string{"nics": {"NCCL_IB_HCA": "=mlx5_1", "UCX_NET_DEVICES": "mlx5_1:1"}}},
		{"vf is NCCL's: two requests, one GID index", "n/ib",
			[]dra.Result{{Request: "a", Pool: "n/vf", Device: byRDMA["mlx5_3"].API.Name}, {Request: "b", Pool: "n/vf", Device: byRDMA["mlx5_4"].API.Name},
				{Request: "c", Pool: "n/ib", Device: byRDMA["mlx5_0"].API.Name}},
			// LocalNode's VFs carry an IPv4-mapped RoCE v2 GID at index 3.
			map[string]map[string]string{"a": {"NCCL_IB_HCA": "=mlx5_3,mlx5_4", "NCCL_IB_GID_INDEX": "3", "UCX_IB_GID_INDEX": "3", "UCX_NET_DEVICES": "mlx5_3:1,mlx5_4:1"},
				"b": {"NCCL_IB_HCA": "=mlx5_3,mlx5_4", "NCCL_IB_GID_INDEX": "3", "UCX_IB_GID_INDEX": "3", "UCX_NET_DEVICES": "mlx5_3:1,mlx5_4:1"}, "c": {}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := &dra.Index{}
			ix.Add("n/ib", ib)
			ix.Add("n/vf", vf)
			ix.SetNoNCCL(tt.noNCCL)
			p := &dra.Preparer{CDIDir: t.TempDir(), StateDir: t.TempDir(), DevRoot: devDir, Devices: ix}
			uid := fmt.Sprintf("uid-%d", i)
			spec := prepareSpec(t, p, uid, tt.results)
			got := map[string]map[string]string{}
			for _, d := range spec.Devices {
				got[strings.TrimPrefix(d.Name, uid+"-")] = env(d)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("env by request (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPrepareUnprepareIdempotent runs the kubelet's retries: Prepare twice,
// Unprepare twice, Unprepare of a claim never prepared, Unprepare before
// Prepare, and a restart between Prepare and Unprepare.
func TestPrepareUnprepareIdempotent(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	c := f.claim("uid-1", "nic:mlx5_2")
	first, err := p.Prepare(c)
	if err != nil {
		t.Fatal(err)
	}
	spec1, _ := f.spec(t, "uid-1")
	again, err := p.Prepare(c)
	if err != nil {
		t.Fatalf("second Prepare: %v", err)
	}
	spec2, _ := f.spec(t, "uid-1")
	if !cmp.Equal(first, again) || !cmp.Equal(spec1, spec2) {
		t.Errorf("second Prepare differs:\n%s\n%s", cmp.Diff(first, again), cmp.Diff(spec1, spec2))
	}

	// Restart: a new Preparer on the same directories knows the claim.
	p = f.preparer()
	if claims, err := p.PreparedClaims(); err != nil || !cmp.Equal(claims, []string{"uid-1"}) {
		t.Errorf("after restart: prepared %v, %v", claims, err)
	}
	if after, err := p.Prepare(c); err != nil || !cmp.Equal(first, after) {
		t.Errorf("Prepare after restart: %v\n%s", err, cmp.Diff(first, after))
	}
	for i := range 2 {
		if err := f.preparer().Unprepare("uid-1"); err != nil {
			t.Fatalf("Unprepare #%d: %v", i+1, err)
		}
		if _, ok := f.spec(t, "uid-1"); ok {
			t.Errorf("Unprepare #%d left the spec", i+1)
		}
	}
	if claims, _ := p.PreparedClaims(); len(claims) != 0 {
		t.Errorf("after Unprepare: prepared %v", claims)
	}
	if err := p.Unprepare("never-prepared"); err != nil {
		t.Errorf("Unprepare of an unknown claim: %v", err)
	}

	// Out of order: Unprepare first, then Prepare works.
	if err := p.Unprepare("uid-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(f.claim("uid-2", "nic:mlx5_2")); err != nil {
		t.Errorf("Prepare after an early Unprepare: %v", err)
	}
	if _, ok := f.spec(t, "uid-2"); !ok {
		t.Errorf("no spec for uid-2")
	}
	// A spec left without a record (a crash, or a record lost) goes too.
	if err := os.Remove(filepath.Join(f.stateDir, "uid-2.json")); err != nil {
		t.Fatal(err)
	}
	if err := p.Unprepare("uid-2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.spec(t, "uid-2"); ok {
		t.Errorf("Unprepare without a record left the spec")
	}
}

// TestPrepareRefuses: a device no longer published, a device another
// prepared claim holds (even across a restart), a bad UID; none of them
// leaves a file behind.
func TestPrepareRefuses(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	if _, err := p.Prepare(f.claim("uid-a", "nic:mlx5_0")); err != nil {
		t.Fatal(err)
	}
	_, err := f.preparer().Prepare(f.claim("uid-b", "nic:mlx5_1", "nic:mlx5_0"))
	if !errors.Is(err, dra.ErrInUse) {
		t.Errorf("a device of another claim: %v, want ErrInUse", err)
	}
	gone := dra.Claim{UID: "uid-c", Results: []dra.Result{{Request: "nic", Pool: pool, Device: "pci-0000-ff-00-0"}}}
	if _, err := p.Prepare(gone); !errors.Is(err, dra.ErrUnknownDevice) {
		t.Errorf("an unpublished device: %v, want ErrUnknownDevice", err)
	}
	other := dra.Claim{UID: "uid-d", Results: []dra.Result{{Request: "nic", Pool: "node-b/hca", Device: f.byRDMA["mlx5_1"].API.Name}}}
	if _, err := p.Prepare(other); !errors.Is(err, dra.ErrUnknownDevice) {
		t.Errorf("another pool's device: %v, want ErrUnknownDevice", err)
	}
	for _, uid := range []string{"", "../x"} {
		if _, err := p.Prepare(dra.Claim{UID: uid}); err == nil {
			t.Errorf("uid %q accepted", uid)
		}
		if err := p.Unprepare(uid); err == nil {
			t.Errorf("Unprepare of uid %q accepted", uid)
		}
	}
	for _, uid := range []string{"uid-b", "uid-c", "uid-d"} {
		if _, ok := f.spec(t, uid); ok {
			t.Errorf("refused claim %s left a spec", uid)
		}
	}
	if claims, _ := p.PreparedClaims(); !cmp.Equal(claims, []string{"uid-a"}) {
		t.Errorf("prepared %v, want only uid-a", claims)
	}
	// Once the holder is unprepared, the device is free.
	if err := p.Unprepare("uid-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(f.claim("uid-b", "nic:mlx5_1", "nic:mlx5_0")); err != nil {
		t.Errorf("after the holder went: %v", err)
	}
}

// TestAdminAccessSharesTheDevice: a claim with admin access gets a device
// another claim holds, and does not hold it against a later claim.
func TestAdminAccessSharesTheDevice(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	if _, err := p.Prepare(f.claim("uid-a", "nic:mlx5_0")); err != nil {
		t.Fatal(err)
	}
	admin := f.claim("uid-admin", "nic:mlx5_0", "nic:mlx5_1")
	for i := range admin.Results {
		admin.Results[i].AdminAccess = true
	}
	if _, err := p.Prepare(admin); err != nil {
		t.Fatalf("admin access to a held device: %v", err)
	}
	if _, err := p.Prepare(f.claim("uid-b", "nic:mlx5_1")); err != nil {
		t.Errorf("a device only an admin claim has: %v", err)
	}
	if _, err := p.Prepare(f.claim("uid-c", "nic:mlx5_0")); !errors.Is(err, dra.ErrInUse) {
		t.Errorf("a device a claim holds: %v, want ErrInUse", err)
	}
}

// TestIndexFollowsPublication: an Index answers for what was added to it only.
func TestIndexFollowsPublication(t *testing.T) {
	ix := &dra.Index{}
	d := discovery.RDMADevice{Name: "mlx5_0", Kind: discovery.KindPF, PCIAddress: "0000:18:00.0"}
	devs, _ := dra.Devices([]discovery.RDMADevice{d}, map[string]bool{"mlx5_0": true})
	ix.Add(dra.PoolName("node-a", "My_Pool"), devs)
	if got, ok := ix.Device("node-a/my-pool", "pci-0000-18-00-0"); !ok || got.Name != "mlx5_0" {
		t.Errorf("Device = %v, %v", got.Name, ok)
	}
	if _, ok := ix.Device("node-a/my-pool", "mlx5_0"); ok {
		t.Errorf("found by RDMA name")
	}
}

// TestPrepareTornRecord: a claim record that does not decode (a machine crash
// before records were fsynced) costs only its own claim. main failed every
// Prepare on the node, a repeated Prepare of a prepared claim too.
func TestPrepareTornRecord(t *testing.T) {
	f := newFixture(t)
	p := f.preparer()
	if _, err := p.Prepare(f.claim("uid-1", "ib:mlx5_0")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(f.claim("uid-torn", "ib:mlx5_1")); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(f.stateDir, "uid-torn.json")
	if err := os.WriteFile(torn, []byte(`{"version":2,"uid":"uid-to`), 0o600); err != nil {
		t.Fatal(err)
	}
	p = f.preparer() // a restarted daemon
	// Another claim, and the prepared one again.
	if _, err := p.Prepare(f.claim("uid-2", "roce:mlx5_3")); err != nil {
		t.Errorf("Prepare of another claim beside a torn record: %v", err)
	}
	if _, err := p.Prepare(f.claim("uid-1", "ib:mlx5_0")); err != nil {
		t.Errorf("repeated Prepare of a prepared claim beside a torn record: %v", err)
	}
	if moved, _ := filepath.Glob(filepath.Join(f.stateDir, "quarantine", "uid-torn.json.*")); len(moved) != 1 {
		t.Errorf("torn record not moved aside: quarantine holds %q", moved)
	}
	// The kubelet prepares the torn claim again: its record is written anew.
	if _, err := p.Prepare(f.claim("uid-torn", "ib:mlx5_1")); err != nil {
		t.Fatalf("Prepare of the claim whose record was torn: %v", err)
	}
	got, err := p.PreparedClaims()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"uid-1", "uid-2", "uid-torn"}, got); diff != "" {
		t.Errorf("prepared claims (-want +got):\n%s", diff)
	}
}

// TestRestoreMovedAsideRecord: the record of a prepared claim that a reader
// moved aside (torn; the CNI plugin or another process read it first) is
// written again from memory by the process that prepared or read it, while
// the claim's CDI spec is there: its device is in use again (another claim
// is refused it) and the CNI plugin finds it. Before, the kubelet does not
// prepare a running pod's claim again, so the record stayed gone for the
// pod's lifetime. A record whose claim was unprepared is not written again,
// nor one this process never knew (a restarted daemon meeting a torn file).
func TestRestoreMovedAsideRecord(t *testing.T) {
	f := newFixture(t)
	var logs bytes.Buffer
	p := f.preparer()
	p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if _, err := p.Prepare(f.claim("uid-torn", "ib:mlx5_1")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prepare(f.claim("uid-gone", "roce:mlx5_3")); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(f.stateDir, "uid-torn.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Another reader (claimrecord.ReadAll, as the CNI plugin does) meets it torn.
	if err := os.WriteFile(filepath.Join(f.stateDir, "uid-torn.json"), []byte(`{"version":2,"uid":"uid-to`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, damaged, err := claimrecord.ReadAll(f.stateDir); err != nil || len(damaged) != 1 {
		t.Fatalf("ReadAll: damaged %v, err %v; want the torn record moved aside", damaged, err)
	}
	if err := p.Unprepare("uid-gone"); err != nil {
		t.Fatal(err)
	}
	p.Restore()
	got, err := os.ReadFile(filepath.Join(f.stateDir, "uid-torn.json"))
	if err != nil {
		t.Fatalf("the record was not written again: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("record written again:\n%s\nwant what Prepare wrote:\n%s", got, want)
	}
	if !strings.Contains(logs.String(), "written again from memory") {
		t.Errorf("log does not say the record was written again:\n%s", logs.String())
	}
	if _, err := p.Prepare(f.claim("uid-other", "ib:mlx5_1")); !errors.Is(err, dra.ErrInUse) {
		t.Errorf("Prepare of the restored record's device for another claim: %v, want ErrInUse", err)
	}
	if ids, err := p.PreparedClaims(); err != nil || !slices.Equal(ids, []string{"uid-torn"}) {
		t.Errorf("prepared claims %v, %v; want uid-torn only (uid-gone was unprepared)", ids, err)
	}
	// A restarted daemon never read the record before it was torn: nothing to write it from.
	if err := os.WriteFile(filepath.Join(f.stateDir, "uid-torn.json"), []byte(`{"version":2,"uid":"uid-to`), 0o600); err != nil {
		t.Fatal(err)
	}
	p2 := f.preparer()
	p2.Restore()
	if _, err := os.Stat(filepath.Join(f.stateDir, "uid-torn.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a process that never knew the record wrote something: %v", err)
	}
}

// TestPrepareMemlockHook: with a hook path, a claim's spec runs the memlock
// hook once, with the highest memlock of its devices' pools; a claim of
// pools without one, or a preparer without a hook, names none.
func TestPrepareMemlockHook(t *testing.T) {
	_, node := scan(t, nodesim.LocalNode(2))
	devs, errs := dra.Devices(node.RDMADevices, health(node))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var ib, vf []dra.Device
	for _, d := range devs {
		if d.RDMA.LinkLayer == "InfiniBand" {
			ib = append(ib, d)
		} else {
			vf = append(vf, d)
		}
	}
	both := []dra.Result{{Request: "a", Pool: "n/ib", Device: ib[0].API.Name}, {Request: "b", Pool: "n/vf", Device: vf[0].API.Name}}
	for i, tt := range []struct {
		name       string
		hook       string
		ib, vf     uint64
		results    []dra.Result
		wantLimits []string
	}{
		{"highest of two pools", "/h/kube-rdma-hook-1", 4 << 20, 64 << 30, both, []string{"68719476736"}},
		{"unlimited wins", "/h/kube-rdma-hook-1", memlockhook.Unlimited, 64 << 30, both, []string{"unlimited"}},
		{"pool without a limit", "/h/kube-rdma-hook-1", 0, 64 << 30, both[:1], nil},
		{"no hook", "", 4 << 20, 64 << 30, both, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ix := &dra.Index{}
			ix.Add("n/ib", ib)
			ix.Add("n/vf", vf)
			ix.SetMemlock("n/ib", tt.ib)
			ix.SetMemlock("n/vf", tt.vf)
			p := &dra.Preparer{CDIDir: t.TempDir(), StateDir: t.TempDir(), DevRoot: t.TempDir(), Devices: ix, MemlockHook: tt.hook}
			spec := prepareSpec(t, p, fmt.Sprintf("uid-%d", i), tt.results)
			var limits []string
			for _, h := range spec.ContainerEdits.Hooks {
				if h.HookName != "createRuntime" || h.Path != tt.hook || len(h.Args) != 4 || h.Args[1] != memlockhook.Command {
					t.Errorf("hook %+v", h)
				}
				limits = append(limits, h.Args[len(h.Args)-1])
			}
			for _, d := range spec.Devices {
				if len(d.ContainerEdits.Hooks) != 0 {
					t.Errorf("device %s carries hooks %+v: the spec's own edits hold it, once per container", d.Name, d.ContainerEdits.Hooks)
				}
			}
			if diff := cmp.Diff(tt.wantLimits, limits); diff != "" {
				t.Errorf("hook limits (-want +got):\n%s", diff)
			}
			if err := cdispec.ValidateVersion(&spec); err != nil {
				t.Errorf("spec version: %v", err)
			}
		})
	}
}

// TestPrepareNetdevHook: with FailClosed, each CDI device of a request with
// devices of the chained pool carries the netdev hook naming them (name and
// function) and the claim's pods; admin-access results, a share without
// the entry's sharedNetdev, another pool's devices and a preparer without
// the memlock hook get none.
func TestPrepareNetdevHook(t *testing.T) {
	f := newFixture(t)
	var names []string
	for n := range f.byRDMA {
		names = append(names, n)
	}
	slices.Sort(names)
	d0, d1 := f.byRDMA[names[0]], f.byRDMA[names[1]]
	fn := func(d dra.Device) string { return attachment.FunctionID(d.RDMA.PCIAddress, d.RDMA.AuxDevice) }
	fc := &dra.FailClosed{StateDir: "/var/lib/cni/kube-rdma", Pool: "hca"}
	hooks := func(p *dra.Preparer, uid string, results []dra.Result) map[string][]string {
		t.Helper()
		if _, err := p.Prepare(dra.Claim{UID: uid, Namespace: "ns", Name: "c", PodUIDs: []string{"pod-2", "pod-1"}, Results: results}); err != nil {
			t.Fatal(err)
		}
		s, ok := fixture{cdiDir: p.CDIDir}.spec(t, uid)
		if !ok {
			t.Fatalf("claim %s: no CDI spec", uid)
		}
		out := map[string][]string{}
		for _, d := range s.Devices {
			for _, h := range d.ContainerEdits.Hooks {
				out[d.Name] = append(out[d.Name], strings.Join(h.Args[1:], " "))
			}
		}
		return out
	}
	prep := func(hook string, fc *dra.FailClosed) *dra.Preparer {
		return &dra.Preparer{CDIDir: t.TempDir(), StateDir: t.TempDir(), DevRoot: f.devs, Devices: f.ix, MemlockHook: hook, FailClosed: fc}
	}
	results := []dra.Result{{Request: "a", Pool: pool, Device: d0.API.Name}, {Request: "a", Pool: pool, Device: d1.API.Name},
		{Request: "mon", Pool: pool, Device: d0.API.Name, AdminAccess: true}}
	got := hooks(prep("/h/kube-rdma-hook-1", fc), "uid-1", results)
	want := map[string][]string{"uid-1-a": {"netdev-hook --state-dir /var/lib/cni/kube-rdma --pool hca --how its DRA claims of driver rdma.kube-rdma.io, chained CNI --devices " +
		d0.RDMA.Name + "@" + fn(d0) + "," + d1.RDMA.Name + "@" + fn(d1) + " --pods pod-1,pod-2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	share := []dra.Result{{Request: "a", Pool: pool, Device: d0.API.Name, ShareID: "s1"}}
	for name, tc := range map[string]struct {
		hook    string
		fc      *dra.FailClosed
		results []dra.Result
	}{
		"a share, sharedNetdev none": {"/h/kube-rdma-hook-1", fc, share},
		"another pool chained":       {"/h/kube-rdma-hook-1", &dra.FailClosed{Pool: "other"}, results},
		"no memlock hook":            {"", fc, results},
		"no fail closed":             {"/h/kube-rdma-hook-1", nil, results},
	} {
		if got := hooks(prep(tc.hook, tc.fc), "uid-2", tc.results); len(got) != 0 {
			t.Errorf("%s: hooks %v, want none", name, got)
		}
	}
	shared := *fc
	shared.SharedNetdev = true
	if got := hooks(prep("/h/kube-rdma-hook-1", &shared), "uid-3", share); len(got["uid-3-a"]) != 1 {
		t.Errorf("a share with sharedNetdev: hooks %v, want one on the request's device", got)
	}
}
