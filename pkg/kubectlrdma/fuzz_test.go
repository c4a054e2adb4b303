package kubectlrdma

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/report"
)

// FuzzNodeState: kubectl rdma reads RDMANodeStates through the typed
// client, which decodes them with encoding/json. On any JSON: the decoded
// state re-encodes to a fixed point (decode, encode, decode, encode gives
// the same bytes); and every printer and check that takes a state (nodes,
// nodes -o wide, topo's table, doctor's node, CNI and allocation checks)
// returns without panic, and without error but ErrNewerState, every check named and with a verdict.
func FuzzNodeState(f *testing.F) {
	gid := 3
	seed := v1alpha1.RDMANodeState{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Spec:       v1alpha1.RDMANodeStateSpec{NodeName: "n1"},
		Status: v1alpha1.RDMANodeStateStatus{
			StateVersion: v1alpha1.StateVersion, DaemonVersion: "v1", RDMANetnsMode: "exclusive",
			LastUpdate: metav1.NewTime(now.Add(-time.Minute)),
			Devices: []v1alpha1.Device{{Name: "mlx5_0", Kind: "pf", PCIAddress: "0000:3b:00.0", NUMANode: 0, Healthy: true,
				Netdevs: []string{"ens1"}, Pools: []string{"gpu-nics"},
				Ports: []v1alpha1.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Netdev: "ens1", RoCEv2GIDIndex: &gid}}}},
			GPUs:        []v1alpha1.GPU{{PCIAddress: "0000:3c:00.0", UUID: "GPU-1"}},
			Affinity:    []v1alpha1.AffinityRow{{GPU: "GPU-1", Levels: []string{"PIX"}}},
			Pools:       []v1alpha1.Pool{{Name: "gpu-nics", Resource: "rdma/gpu-nics", Mode: "exclusive", Devices: []string{"mlx5_0"}}},
			Allocations: []v1alpha1.Allocation{alloc("ns", "p", "rdma/gpu-nics", []string{"gpu-nics-slot-0"}, []string{"mlx5_0"}, []string{"ens1"})},
			CNI:         &v1alpha1.CNIStatus{Mode: "chained", ChainedPool: "gpu-nics", Attachments: 1},
		},
	}
	if b, err := json.Marshal(seed); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"metadata":{"name":"\u001b[31mx"},"status":{"stateVersion":99,"lastUpdate":"2026-01-01T00:00:00.5+02:00","devices":[{"name":"a\nb","ports":[{}]}]}}`))
	f.Add([]byte(`{"status":{"affinity":[{"gpu":"g","levels":[]}],"gpus":[{"minor":-1}],"pools":[{"slots":-5}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s v1alpha1.RDMANodeState
		if json.Unmarshal(data, &s) != nil {
			return
		}
		once := roundTrip(t, &s)
		if twice := roundTrip(t, decode(t, once)); !bytes.Equal(once, twice) {
			t.Fatalf("a state re-encodes differently:\n%s\n%s", once, twice)
		}

		newer := checkVersion(&s)
		for _, r := range []StateRow{rowOf(&s), tableRow(&s)} {
			for _, wide := range []bool{false, true} {
				var out bytes.Buffer
				err := writeNodes(&out, nil, []StateRow{r}, wide, now)
				if (err != nil) != (newer != nil) || (err != nil && !errors.Is(err, ErrNewerState)) || out.Len() == 0 {
					t.Fatalf("nodes (wide %v): %v (the state's version: %v), %d bytes", wide, err, newer, out.Len())
				}
			}
		}
		if err := report.WriteTableWith(io.Discard, toDiscovery(&s), report.TableOptions{NoCharDevices: true}); err != nil {
			t.Fatalf("topo table: %v", err)
		}

		node := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.Name}}
		checks, err := nodeChecks(&node, &s, newer, now, 5*time.Minute)
		if err != nil {
			t.Fatalf("doctor's node checks: %v", err)
		}
		checks = append(checks, healthChecks(s.Status.Devices, nil)...)
		checks = append(checks, cniCheck(&s.Status))
		if len(s.Status.Allocations) > 0 { // one pod is enough to walk the code
			a := s.Status.Allocations[0]
			p := pod(a.Namespace, a.Pod, s.Name, corev1.PodRunning, map[string]int64{a.Resource: int64(len(a.DeviceIDs))})
			_, _ = podAllocation(&p, map[string]*v1alpha1.RDMANodeState{s.Name: &s})
			checks = append(checks, allocationChecks(&p, &s)...)
			if c, ok := cniAttachmentCheck(&p, &s); ok {
				checks = append(checks, c)
			}
		}
		for _, c := range checks {
			if c.Name == "" || !slices.Contains([]Verdict{Pass, Warn, Fail, Skip}, c.Verdict) {
				t.Errorf("check %+v: want a name and a verdict", c)
			}
		}
	})
}

func roundTrip(t *testing.T, s *v1alpha1.RDMANodeState) []byte {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatalf("encode a decoded state: %v", err)
	}
	return b
}

func decode(t *testing.T, b []byte) *v1alpha1.RDMANodeState {
	t.Helper()
	var s v1alpha1.RDMANodeState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("decode an encoded state: %v\n%s", err, b)
	}
	return &s
}
