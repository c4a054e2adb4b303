package kubectlrdma

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/claimrecord"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// The CRD's bounds against a real API server: the publisher's status for
// the biggest simulated node (1,024 devices, 8 GPUs) is accepted; a status
// over a bound (too many items, too long, not the format) is rejected with
// the field and the reason. (Its name starts with TestAgainstAPIServer:
// make test-apiserver runs it.)
func TestAgainstAPIServerBounds(t *testing.T) {
	_, cfg := startAPIServer(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	write := func(st v1alpha1.RDMANodeStateStatus) error {
		n++
		name := fmt.Sprintf("node-%d", n)
		obj := &v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.RDMANodeStateSpec{NodeName: name}}
		if err := c.Create(t.Context(), obj); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		obj.Status = st
		return c.Status().Update(t.Context(), obj)
	}

	big, bigView, n1024 := syntheticNode(t)
	t.Run("a reload error over several lines", func(t *testing.T) {
		st := *big.DeepCopy()
		st.ConfigErrors = []string{"invalid config: pool \"a\": no selector\npool \"b\": no selector"}
		if err := write(st); err != nil {
			t.Fatalf("a joined config error is refused: the daemon could not publish its state: %v", err)
		}
	})
	t.Run("the biggest simulated node", func(t *testing.T) {
		if len(big.Devices) != 1024 || len(big.GPUs) != 8 {
			t.Fatalf("%d devices, %d GPUs: want Synthetic(8, 16, 63)'s 1,024 and 8", len(big.Devices), len(big.GPUs))
		}
		if err := write(*big.DeepCopy()); err != nil {
			t.Fatalf("the publisher's status of a 1,024-device node is refused: %v", err)
		}
	})

	t.Run("the most claims the publisher writes", func(t *testing.T) {
		st := *big.DeepCopy()
		var recs []claimrecord.Record
		for i := range nodestate.MaxClaims + 1 {
			d := n1024[i%len(n1024)]
			recs = append(recs, claimrecord.Record{UID: fmt.Sprintf("6f1c%04x-2b3d-4e5f-8a9b-%012x", i, i), Namespace: "train",
				Name: fmt.Sprintf("worker-%d-nic", i), PodUIDs: []string{fmt.Sprintf("0d9e%04x-2b3d-4e5f-8a9b-%012x", i, i)},
				Devices: []claimrecord.Device{{Request: "nic/roce", Pool: "big/roce-dra", Device: "pci-" + strings.NewReplacer(":", "-", ".", "-").Replace(d.PCIAddress),
					RDMA: d.Name, PCIAddress: d.PCIAddress}}})
		}
		withClaims := nodestate.Build(nodestate.Input{View: bigView, Claims: recs, Now: time.Now()})
		st.Claims, st.Devices, st.Summary.Claims = withClaims.Claims, withClaims.Devices, withClaims.Summary.Claims
		if len(st.Claims) != nodestate.MaxClaims || st.Devices[0].Shares == nil {
			t.Fatalf("%d claims, device 0's shares %v: want %d and some", len(st.Claims), st.Devices[0].Shares, nodestate.MaxClaims)
		}
		if err := write(st); err != nil {
			t.Fatalf("the publisher's status with %d claims is refused: %v", nodestate.MaxClaims, err)
		}
	})

	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name   string
		mutate func(st *v1alpha1.RDMANodeStateStatus)
		want   []metav1.StatusCause // Type and Field of each cause
	}{
		{"10,000 config errors", func(st *v1alpha1.RDMANodeStateStatus) {
			st.ConfigErrors = make([]string, 10000)
			for i := range st.ConfigErrors {
				st.ConfigErrors[i] = "x"
			}
		}, []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooMany), Field: "status.configErrors"}}},
		{"a daemon version of 10,000 characters", func(st *v1alpha1.RDMANodeStateStatus) { st.DaemonVersion = long(10000) },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooLong), Field: "status.daemonVersion"}}},
		{"a netdev name of 16 characters", func(st *v1alpha1.RDMANodeStateStatus) { st.Devices[0].Ports[0].Netdev = long(16) },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooLong), Field: "status.devices[0].ports[0].netdev"}}},
		{"an escape sequence in a device name", func(st *v1alpha1.RDMANodeStateStatus) { st.Devices[1].Name = "mlx5_1\x1b]0;pwned\x07" },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.devices[1].name"}}},
		{"a config error of 40,000 characters", func(st *v1alpha1.RDMANodeStateStatus) { st.ConfigErrors = []string{long(40000)} },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooLong), Field: "status.configErrors[0]"}}},
		{"a control character in the daemon version", func(st *v1alpha1.RDMANodeStateStatus) { st.DaemonVersion = "v1\x1b[2J" },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.daemonVersion"}}},
		{"a right-to-left override in a netdev", func(st *v1alpha1.RDMANodeStateStatus) { st.Devices[2].Netdevs = []string{"eth\u202e0"} },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.devices[2].netdevs[0]"}}},
		{"an escape sequence in the summary table's pools (kubectl get -o wide prints it)", func(st *v1alpha1.RDMANodeStateStatus) {
			st.Summary.Table.Pools = "ib 1/8/8\x1b]0;pwned\x07"
		}, []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.summary.table.pools"}}},
		{"a right-to-left override in the summary table's link layers", func(st *v1alpha1.RDMANodeStateStatus) {
			st.Summary.Table.LinkLayers = "Ethernet\u202e"
		}, []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.summary.table.linkLayers"}}},
		{"not a PCI address", func(st *v1alpha1.RDMANodeStateStatus) { st.GPUs[0].PCIAddress = "0000:19:00" },
			[]metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.gpus[0].pciAddress"}}},
		{"an escape sequence in a claim's name", func(st *v1alpha1.RDMANodeStateStatus) {
			st.Claims = []v1alpha1.Claim{{Namespace: "train", Name: "nic\x1b[2J", UID: "u-1", Devices: []v1alpha1.ClaimDevice{}}}
		}, []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeInvalid), Field: "status.claims[0].name"}}},
		{"1,025 claims", func(st *v1alpha1.RDMANodeStateStatus) {
			for i := range 1025 {
				st.Claims = append(st.Claims, v1alpha1.Claim{Namespace: "train", Name: "c", UID: fmt.Sprint(i), Devices: []v1alpha1.ClaimDevice{}})
			}
		}, []metav1.StatusCause{{Type: metav1.CauseType(field.ErrorTypeTooMany), Field: "status.claims"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := *big.DeepCopy()
			tc.mutate(&st)
			err := write(st)
			var se *apierrors.StatusError
			if !apierrors.IsInvalid(err) || !errors.As(err, &se) || se.ErrStatus.Details == nil {
				t.Fatalf("want Invalid, got %v", err)
			}
			var got []metav1.StatusCause
			for _, c := range se.ErrStatus.Details.Causes {
				got = append(got, metav1.StatusCause{Type: c.Type, Field: c.Field})
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("causes (-want +got):\n%s\nmessage: %s", diff, err)
			}
			t.Logf("refused: %s", err)
		})
	}
}

// syntheticNode is what the publisher (nodestate.Build) writes for
// nodesim.Synthetic(8, 16, 63): 1,024 RDMA devices in one exclusive pool,
// 8 GPUs, a pod holding eight devices; with the view and the devices it
// was built from.
func syntheticNode(t *testing.T) (v1alpha1.RDMANodeStateStatus, agent.View, []discovery.RDMADevice) {
	n := scan(t, nodesim.Synthetic(8, 16, 63))
	healthy := map[string]bool{}
	p := agent.PoolView{Name: "roce", Resource: resourcePrefix + "roce", Mode: config.Exclusive, ByID: map[string][]string{}}
	var ids []string
	for _, d := range n.RDMADevices {
		healthy[d.Name] = true
		p.Members = append(p.Members, d.Name)
		p.ByID[d.PCIAddress] = []string{d.Name}
		if len(ids) < 8 {
			ids = append(ids, d.PCIAddress)
		}
	}
	p.Capacity, p.Allocatable = len(p.Members), len(p.Members)
	view := agent.View{NodeName: "big", NetnsMode: rdma.NetnsExclusive, NUMANodes: 2,
		Snapshot: &nodewatch.Snapshot{Node: n, Healthy: healthy}, Pools: []agent.PoolView{p}}
	return nodestate.Build(nodestate.Input{
		View:          view,
		Containers:    []podresources.ContainerDevices{{Namespace: "train", Pod: "big-0", Container: "main", Resource: p.Resource, DeviceIDs: ids}},
		CNIMode:       "chained",
		DaemonVersion: "v0.4.0-3-gabcdef0-dirty",
		Now:           time.Now(),
	}), view, n.RDMADevices
}
