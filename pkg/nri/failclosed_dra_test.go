package nri

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
)

// draSource is a node with the device plugin's pool hca (mlx5_0) and two
// devices of the DRA front end, which are in no pool of the view:
// mlx5_5 of pool rdma_dra (the chained pool) and mlx5_6 of pool other.
type draSource struct{}

func (draSource) View() (agent.View, <-chan struct{}) {
	snap := &nodewatch.Snapshot{Node: &discovery.Node{RDMADevices: []discovery.RDMADevice{
		{Name: "mlx5_0", CharDevices: []string{"/dev/infiniband/uverbs0"}},
		{Name: "mlx5_5", PCIAddress: "0000:5e:00.0", CharDevices: []string{"/dev/infiniband/uverbs5"}},
		{Name: "mlx5_6", PCIAddress: "0000:5e:00.1", CharDevices: []string{"/dev/infiniband/uverbs6"}},
	}}}
	return agent.View{Snapshot: snap, Pools: []agent.PoolView{{Name: "hca", Members: []string{"mlx5_0"}, Memlock: gi}}}, make(chan struct{})
}

// claimDir is the ClaimLister of a claims directory.
type claimDir string

func (d claimDir) Claims() ([]claimrecord.Record, error) {
	recs, _, err := claimrecord.ReadAll(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return recs, err
}

// TestFailClosedDRAAgainstNRIRuntime: the chained pool rdma_dra is the DRA
// front end's. A container of the pod's claim (by its device node, or by
// the claim's CDI device alone) whose sandbox has no attachment is refused
// by the runtime side of NRI with a message naming the pod, the device,
// the pool, the driver and the fix; with the sandbox's complete record it
// is created; a claim of pool other (no netdevs) is never refused.
func TestFailClosedDRAAgainstNRIRuntime(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "nri.sock")
	rt := newRuntime(t, socket)
	t.Cleanup(rt.Stop)
	store := attachment.Store{Dir: filepath.Join(dir, "cni")}
	claims := filepath.Join(dir, "claims")
	const podUID = "6f0c8a4e-2b1d-4c55-9a8e-1f2d3c4b5a69" // recordedPod's
	for _, r := range []claimrecord.Record{
		{UID: "c1", Namespace: "ml", Name: "nic", PodUIDs: []string{podUID},
			Devices: []claimrecord.Device{{Request: "nic", Pool: claimrecord.DRAPool("n1", "rdma_dra"), Device: "pci-0000-5e-00-0", RDMA: "mlx5_3", PCIAddress: "0000:5e:00.0"}}},
		{UID: "c2", Namespace: "ml", Name: "plain", PodUIDs: []string{podUID},
			Devices: []claimrecord.Device{{Request: "hca", Pool: claimrecord.DRAPool("n1", "other"), Device: "pci-0000-5e-00-1", RDMA: "mlx5_6", PCIAddress: "0000:5e:00.1"}}},
	} {
		if err := claimrecord.Write(claims, r); err != nil {
			t.Fatal(err)
		}
	}
	p := New(Config{Socket: socket, Source: draSource{}, Backoff: 10 * time.Millisecond, FailClosed: true,
		ChainedPool: "rdma_dra", Records: store, Claims: claimDir(claims)})
	runPlugin(t, p)
	waitFor(t, "registration", func() bool { return p.Report().Connected })
	create := func(ctr *api.Container) error {
		_, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: ctr})
		return err
	}
	hca := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192)}, nil)
	waitFor(t, "the runtime to call the plugin", func() bool { return create(hca) == nil })

	// Pool other gets no netdevs: its claim's container is created.
	if err := create(recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs6", 231, 198)}, nil, "kube-rdma.io/claim=c2-hca")); err != nil {
		t.Errorf("CreateContainer of a claim of a pool without netdevs: %v", err)
	}
	byNode := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs5", 231, 197), rdmaCM}, nil)
	byCDI := recordedContainer(nil, nil, "kube-rdma.io/claim=c1-nic")
	for name, ctr := range map[string]*api.Container{"device node": byNode, "CDI device": byCDI} {
		err := create(ctr)
		if err == nil {
			t.Fatalf("%s: CreateContainer of a container of a claim of the chained DRA pool without an attachment: no error", name)
		}
		for _, want := range []string{"pod ml/trainer-0", "mlx5_5", "pool rdma_dra", "DRA claims of driver rdma.kube-rdma.io", "conflist", "delete the pod"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: refusal %q does not say %q", name, err, want)
			}
		}
	}
	if r := p.Report(); r.Refused != 2 {
		t.Errorf("report %+v: want 2 refused", r)
	}

	a := attachment.Attachment{Key: attachment.Key{ContainerID: "0c1e9f6d5b", IfName: "net1"}, Complete: true,
		Pod:     &attachment.PodRef{Namespace: "ml", Name: "trainer-0", UID: podUID},
		Devices: []attachment.Device{{RDMA: "mlx5_5", PodIfName: "net1"}}}
	if err := store.Save(a); err != nil {
		t.Fatal(err)
	}
	for name, ctr := range map[string]*api.Container{"device node": byNode, "CDI device": byCDI} {
		if err := create(ctr); err != nil {
			t.Errorf("%s: CreateContainer with the sandbox's complete record: %v", name, err)
		}
	}
}
