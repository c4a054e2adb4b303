package nri

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kube-rdma/kube-rdma/pkg/agent/netdevcheck"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// TestFailClosedAgainstNRIRuntime: pool roce is the chained pool. A
// container with roce's uverbs2 whose sandbox has no attachment record is
// refused by the runtime side of NRI with a message naming the pod, the
// device, the pool and the fix; once the sandbox's complete record is there
// it is created; a container of pool hca (no netdevs) is never refused;
// with FailClosed off nothing is refused.
func TestFailClosedAgainstNRIRuntime(t *testing.T) {
	for _, failClosed := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[failClosed], func(t *testing.T) {
			dir := t.TempDir()
			socket := filepath.Join(dir, "nri.sock")
			rt := newRuntime(t, socket)
			t.Cleanup(rt.Stop)
			store := attachment.Store{Dir: filepath.Join(dir, "cni")}
			logs := &syncBuffer{}
			p := New(Config{Socket: socket, Source: fakeSource{}, Backoff: 10 * time.Millisecond, FailClosed: failClosed,
				ChainedPool: "roce", Records: store, Logger: slog.New(slog.NewTextHandler(logs, nil))})
			runPlugin(t, p)
			waitFor(t, "registration", func() bool { return p.Report().Connected })

			create := func(ctr *api.Container) ([]*api.POSIXRlimit, error) {
				rsp, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: ctr})
				return rsp.GetAdjust().GetRlimits(), err
			}
			hca := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs0", 231, 192)}, nil)
			waitFor(t, "the runtime to call the plugin", func() bool {
				rl, err := create(hca)
				return err == nil && len(rl) == 1
			})
			roce := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs2", 231, 194), rdmaCM}, nil)
			_, err := create(roce)
			if !failClosed {
				if err != nil {
					t.Fatalf("CreateContainer with fail closed off: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("CreateContainer of a roce container without an attachment: no error")
			}
			for _, want := range []string{"pod ml/trainer-0", "mlx5_2", "pool roce (chained CNI)", "conflist", "delete the pod"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			if v := testutil.ToFloat64(p.decisions.WithLabelValues("refused")); v != 1 {
				t.Errorf(`kube_rdma_nri_containers_total{decision="refused"} = %v, want 1`, v)
			}
			if r := p.Report(); !r.FailClosed || r.Refused != 1 {
				t.Errorf("report %+v: want failClosed, 1 refused", r)
			}

			// A hostNetwork pod gets no CNI ADD: it is let through.
			hostNet := recordedPod(nil)
			hostNet.Linux.Namespaces = []*api.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}}
			if _, err := rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: hostNet, Container: roce}); err != nil {
				t.Errorf("CreateContainer in a hostNetwork pod: %v", err)
			}

			// An ADD in flight (record not complete) is still refused; the
			// sandbox's complete record lets the container through.
			a := attachment.Attachment{Key: attachment.Key{ContainerID: "0c1e9f6d5b", IfName: "net1"},
				Pod:     &attachment.PodRef{Namespace: "ml", Name: "trainer-0", UID: "6f0c8a4e-2b1d-4c55-9a8e-1f2d3c4b5a69"},
				Devices: []attachment.Device{{RDMA: "mlx5_2", PodIfName: "net1"}}}
			if err := store.Save(a); err != nil {
				t.Fatal(err)
			}
			if _, err := create(roce); err == nil {
				t.Error("CreateContainer with an incomplete record: no error")
			}
			a.Complete = true
			if err := store.Save(a); err != nil {
				t.Fatal(err)
			}
			rl, err := create(roce)
			if err != nil {
				t.Fatalf("CreateContainer with the sandbox's complete record: %v", err)
			}
			want := []*api.POSIXRlimit{{Type: "RLIMIT_MEMLOCK", Hard: ^uint64(0), Soft: ^uint64(0)}}
			if diff := cmp.Diff(want, rl, cmpopts.IgnoreUnexported(api.POSIXRlimit{})); diff != "" {
				t.Errorf("rlimits (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHoldings: the RDMA devices behind the container's nodes, by pool.
func TestHoldings(t *testing.T) {
	ctr := wireContainer(t, recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs1", 231, 193),
		charDev("/dev/infiniband/umad1", 231, 1), charDev("/dev/infiniband/uverbs2", 231, 194)}, nil))
	want := []netdevcheck.Holding{{Pool: "hca", Devices: []string{"mlx5_1"}}, {Pool: "roce", Devices: []string{"mlx5_2"}}}
	if diff := cmp.Diff(want, Holdings(ctr, testDevices())); diff != "" {
		t.Errorf("Holdings (-want +got):\n%s", diff)
	}
	cdi := wireContainer(t, recordedContainer(nil, nil, "rdma.kube-rdma.io/roce=all"))
	want = []netdevcheck.Holding{{Pool: "roce", Devices: []string{"all"}}}
	if diff := cmp.Diff(want, Holdings(cdi, testDevices())); diff != "" {
		t.Errorf("Holdings of a CDI device (-want +got):\n%s", diff)
	}
}

// TestDecodeHostNetwork: a sandbox whose namespaces the runtime lists
// without a network one is a hostNetwork pod; no list says nothing.
func TestDecodeHostNetwork(t *testing.T) {
	for _, tc := range []struct {
		name string
		ns   []*api.LinuxNamespace
		want bool
	}{
		{"no namespaces listed", nil, false},
		{"pod network", []*api.LinuxNamespace{{Type: "pid"}, {Type: "network", Path: "/var/run/netns/cni-1"}}, false},
		{"host network", []*api.LinuxNamespace{{Type: "pid"}, {Type: "ipc"}}, true},
	} {
		pod := recordedPod(nil)
		pod.Linux.Namespaces = tc.ns
		if got := wirePod(t, pod).HostNetwork; got != tc.want {
			t.Errorf("%s: HostNetwork %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFailClosedSharedChainedPool: the chained pool roce is shared. With
// the entry's sharedNetdev none (the default) its pods get device nodes
// only, so a container without an attachment record is created; with
// macvlan or ipvlan they get a child netdev, and it is refused.
func TestFailClosedSharedChainedPool(t *testing.T) {
	for _, sharedNetdev := range []bool{false, true} {
		t.Run(map[bool]string{false: "sharedNetdev none", true: "sharedNetdev macvlan"}[sharedNetdev], func(t *testing.T) {
			dir := t.TempDir()
			socket := filepath.Join(dir, "nri.sock")
			rt := newRuntime(t, socket)
			t.Cleanup(rt.Stop)
			p := New(Config{Socket: socket, Source: fakeSource{sharedRoce: true}, Backoff: 10 * time.Millisecond, FailClosed: true,
				ChainedPool: "roce", SharedNetdev: sharedNetdev, Records: attachment.Store{Dir: filepath.Join(dir, "cni")}, Logger: slog.New(slog.DiscardHandler)})
			runPlugin(t, p)
			waitFor(t, "registration", func() bool { return p.Report().Connected })
			roce := recordedContainer([]*api.LinuxDevice{charDev("/dev/infiniband/uverbs2", 231, 194), rdmaCM}, nil)
			var err error
			waitFor(t, "the runtime to call the plugin", func() bool {
				var rsp *api.CreateContainerResponse
				rsp, err = rt.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: recordedPod(nil), Container: roce})
				return err != nil || len(rsp.GetAdjust().GetRlimits()) == 1
			})
			if !sharedNetdev && err != nil {
				t.Errorf("CreateContainer of a shared pool's container, sharedNetdev none: %v", err)
			}
			if sharedNetdev && (err == nil || !strings.Contains(err.Error(), "pool roce (chained CNI)")) {
				t.Errorf("CreateContainer of a shared pool's container without its child netdev: %v, want refused", err)
			}
		})
	}
}
