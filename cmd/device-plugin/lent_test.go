package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestLentDevicesWiring: with --cni-state-dir the agent asks the CNI
// plugin's records of this boot which devices are lent to pods; without,
// it asks nothing.
func TestLentDevicesWiring(t *testing.T) {
	tree, err := nodesim.Build(t.TempDir(), nodesim.SoftRoCE())
	if err != nil {
		t.Fatal(err)
	}
	boot, err := attachment.ReadBootID("/proc")
	if err != nil {
		t.Skipf("no boot ID: %v", err)
	}
	store := attachment.Store{Dir: t.TempDir(), BootID: boot}
	recs := []attachment.Attachment{
		{Key: attachment.Key{ContainerID: "c1", IfName: "eth0"}, Network: "rdma",
			Devices: []attachment.Device{{RDMA: "rxe0", SoftType: "rxe", PodIfName: "net1"}}},
		{Key: attachment.Key{ContainerID: "c2", IfName: "eth0"}, Network: "rdma", Complete: true,
			Devices: []attachment.Device{{RDMA: "mlx5_0", RDMAExclusive: true, PodIfName: "net1", Returned: true}}},
	}
	for _, r := range recs {
		if err := store.Save(r); err != nil {
			t.Fatal(err)
		}
	}
	args := func(stateDir string) []string {
		return []string{"--kubelet-dir", t.TempDir(), "--sysfs-root", tree.SysRoot, "--proc-root", tree.ProcRoot, "--dev-root", t.TempDir(),
			"--metrics-addr", "", "--cdi-dir", "", "--alloc-dir", "", "--pools-file", "", "--node-state=false", "--pod-resources-socket", "",
			"--cni-state-dir", stateDir}
	}
	cfg, err := parseRunFlags(args(store.Dir), &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	d, _, err := newAgent(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Config().Lent == nil {
		t.Fatal("no LentDevices with --cni-state-dir")
	}
	got, err := d.Config().Lent.LentDevices()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{"rxe0": true}, got); diff != "" {
		t.Errorf("LentDevices (-want +got):\n%s", diff)
	}
	if f := d.Config().LentFile; f != "" {
		t.Errorf("LentFile %q without --pools-file, want none", f)
	}
	// With the pools file, the lent devices are kept beside it across restarts.
	pools := filepath.Join(t.TempDir(), nodepools.FileName)
	if cfg, err = parseRunFlags(append(args(store.Dir), "--pools-file", pools), &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if d, _, err = newAgent(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := d.Config().LentFile, filepath.Join(filepath.Dir(pools), "_lent-devices.json"); got != want {
		t.Errorf("LentFile %q, want %q", got, want)
	}
	cfg, err = parseRunFlags(args(""), &bytes.Buffer{}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err = newAgent(cfg, nil); err != nil {
		t.Fatal(err)
	}
	if d.Config().Lent != nil || d.Config().LentFile != "" {
		t.Error("LentDevices or LentFile without --cni-state-dir")
	}
}
