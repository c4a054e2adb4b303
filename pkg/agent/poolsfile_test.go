package agent_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/nodepools"
)

// TestPoolsFile: the daemon writes the node's pools file (the CNI plugin's
// "deviceID in no pool" refusal) with each served pool and its members'
// RDMA names and PCI addresses, and rewrites it when a reload changes the
// pools; a refused pool (gpuAligned without --alloc-dir) is not in it. A
// pool's allowConfiguredNetdevs is published with it.
func TestPoolsFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	path := nodepools.Path(filepath.Join(dir, "alloc"))
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n"+
		"- {name: ib, mode: exclusive, selectors: {linkLayers: [InfiniBand], rdmaDevices: [mlx5_0, mlx5_1]}}\n"+
		"- {name: aligned, mode: exclusive, binding: gpuAligned, nccl: false, selectors: {rdmaDevices: [mlx5_2]}}\n")
	e := start(t, nodesim.HGX(), func(c *agenttest.Config) { c.ConfigFile = conf; c.PoolsFile = path })
	var got nodepools.File
	poll(t, 5*time.Second, "pools file with pool ib", func() bool {
		var err error
		got, err = nodepools.Read(path)
		return err == nil && len(got.Pools) == 1
	})
	want := nodepools.Pool{Name: "ib", Mode: "exclusive", Frontend: "devicePlugin"}
	for _, name := range []string{"mlx5_0", "mlx5_1"} {
		d, err := discovery.Scanner{SysRoot: e.Tree.SysRoot}.LookupRDMA(name)
		if err != nil {
			t.Fatal(err)
		}
		want.Devices = append(want.Devices, nodepools.Device{RDMA: d.Name, PCIAddress: d.PCIAddress})
	}
	if len(want.Devices) != 2 || want.Devices[0].PCIAddress == "" {
		t.Fatalf("state devices %+v: want mlx5_0 and mlx5_1 with PCI addresses", want.Devices)
	}
	if diff := cmp.Diff(nodepools.File{Pools: []nodepools.Pool{want}}, got); diff != "" {
		t.Errorf("pools file (-want +got)\n%s", diff)
	}
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: roce, mode: shared, allowConfiguredNetdevs: true, selectors: {rdmaDevices: [mlx5_3]}}\n")
	poll(t, 5*time.Second, "pools file with pool roce only", func() bool {
		f, err := nodepools.Read(path)
		return err == nil && len(f.Pools) == 1 && f.Pools[0].Name == "roce" && f.Pools[0].Mode == "shared" &&
			f.Pools[0].AllowConfiguredNetdevs && len(f.Pools[0].Devices) == 1 && f.Pools[0].Devices[0].RDMA == "mlx5_3"
	})
}

// TestPoolsFileWithdrawn: once the chart is being uninstalled (the CNI
// uninstall marker, Config.Uninstalling), the daemon removes the pools file
// and does not write it again, neither when it finds it missing nor when
// the pools change: helm uninstall leaves none behind, whichever of its
// hook and the daemon's exit comes first.
func TestPoolsFileWithdrawn(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "config.yaml")
	path := nodepools.Path(filepath.Join(dir, "alloc"))
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: ib, mode: exclusive, selectors: {rdmaDevices: [mlx5_0]}}\n")
	var uninstalling atomic.Bool
	start(t, nodesim.HGX(), func(c *agenttest.Config) {
		c.ConfigFile, c.PoolsFile, c.FilesInterval = conf, path, 10*time.Millisecond
		c.Uninstalling = uninstalling.Load
	})
	poll(t, 5*time.Second, "pools file", func() bool { _, err := nodepools.Read(path); return err == nil })
	uninstalling.Store(true)
	poll(t, 5*time.Second, "pools file removed", func() bool { _, err := os.Stat(path); return errors.Is(err, fs.ErrNotExist) })
	// A reload changes the pools: nothing is written; nor after many
	// FilesInterval ticks.
	writeFile(t, conf, "resourcePrefix: rdma.example.com\npools:\n- {name: roce, mode: shared, selectors: {rdmaDevices: [mlx5_3]}}\n")
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("pools file written again while uninstalling: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
