package deviceplugin_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/agenttest"
	"github.com/kube-rdma/kube-rdma/internal/kubeletstub"
	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/devinfo"
)

func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// Allocate writes the NPWG device-info file of each kubelet device that is
// one PCI function (a PF, a VF with its PF, a shared slot of one NIC), none
// for an SF or a slot of several NICs; a device leaving its pool takes its
// file, and the daemon's stop takes the rest.
func TestAllocateWritesDeviceInfo(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, conf, roceConfig+"- {name: one, mode: shared, slots: 2, nccl: false, selectors: {pciAddresses: [\"0000:b5:00.0\"]}}\n")
	dir := filepath.Join(t.TempDir(), "devinfo", "dp")
	src := make(agenttest.PokeSource)
	e := start(t, nodesim.RoCESRIOV(), func(c *agenttest.Config) {
		c.ConfigFile, c.DeviceInfoDir = conf, dir
		c.Events = []agent.EventSource{src}
	})
	e.WaitFor(t, 5*time.Second, "pools listed", func(k *kubeletstub.Kubelet) bool {
		for _, r := range []string{"pf", "vf-gpu0", "sf", "numa1", "one"} {
			if _, ok := k.Devices("rdma.example.com/" + r); !ok {
				return false
			}
		}
		return true
	})
	for _, a := range []struct{ pool, id string }{
		{"pf", "0000:16:00.0"}, {"vf-gpu0", "0000:15:00.2"}, {"vf-gpu0", "0000:15:00.3"}, {"sf", "mlx5_core.sf.2"},
		{"numa1", "numa1-0"}, {"one", "one-1"},
	} {
		if _, err := e.Kubelet.Allocate(context.Background(), "rdma.example.com/"+a.pool, []string{a.id}); err != nil {
			t.Fatalf("allocate %s %s: %v", a.pool, a.id, err)
		}
	}
	want := []string{
		"rdma.example.com-one-one-1-device.json",
		"rdma.example.com-pf-0000:16:00.0-device.json",
		"rdma.example.com-vf-gpu0-0000:15:00.2-device.json",
		"rdma.example.com-vf-gpu0-0000:15:00.3-device.json",
	}
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Fatalf("files after Allocate (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		resource, id string
		want         devinfo.PCI
	}{
		{"rdma.example.com/vf-gpu0", "0000:15:00.2", devinfo.PCI{PCIAddress: "0000:15:00.2", RDMADevice: "mlx5_8", PFPCIAddress: "0000:15:00.0"}},
		{"rdma.example.com/pf", "0000:16:00.0", devinfo.PCI{PCIAddress: "0000:16:00.0", RDMADevice: "mlx5_1"}},
		{"rdma.example.com/one", "one-1", devinfo.PCI{PCIAddress: "0000:b5:00.0", RDMADevice: "mlx5_6"}},
	} {
		got, err := devinfo.Load(dir, tt.resource, tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(devinfo.NewPCI(tt.want), got); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", tt.resource, tt.id, diff)
		}
	}

	// The VF 0000:15:00.3 (mlx5_9) goes: its file goes, the others stay.
	if err := e.Tree.RemoveRDMA("mlx5_9"); err != nil {
		t.Fatal(err)
	}
	src <- struct{}{}
	e.WaitFor(t, 5*time.Second, "VF gone", func(k *kubeletstub.Kubelet) bool {
		d, _ := k.Devices("rdma.example.com/vf-gpu0")
		return len(d) == 1
	})
	want = slices.DeleteFunc(want, func(s string) bool { return s == "rdma.example.com-vf-gpu0-0000:15:00.3-device.json" })
	if diff := cmp.Diff(want, files(t, dir)); diff != "" {
		t.Errorf("files after the VF went (-want +got):\n%s", diff)
	}

	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{}, files(t, dir)); diff != "" {
		t.Errorf("files after the daemon's stop (-want +got):\n%s", diff)
	}
}
