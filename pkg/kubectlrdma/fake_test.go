package kubectlrdma

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// fakeCluster serves a world from memory; err, when set, is every call's
// answer (a missing CRD, a Forbidden).
type fakeCluster struct {
	w   *world
	err error
	// noCRD makes the state methods answer ErrCRDMissing.
	noCRD bool
	// lists and gets count ListStates and GetState calls.
	lists, gets int
}

func (f *fakeCluster) newCluster(genericclioptions.RESTClientGetter) (Cluster, error) { return f, nil }

func (f *fakeCluster) ListStates(context.Context) ([]v1alpha1.RDMANodeState, error) {
	f.lists++
	if f.noCRD {
		return nil, ErrCRDMissing
	}
	out := make([]v1alpha1.RDMANodeState, len(f.w.states))
	for i := range f.w.states {
		f.w.states[i].DeepCopyInto(&out[i])
	}
	return out, f.err
}

func (f *fakeCluster) GetState(_ context.Context, name string) (*v1alpha1.RDMANodeState, error) {
	f.gets++
	if f.noCRD {
		return nil, ErrCRDMissing
	}
	for _, s := range f.w.states {
		if s.Name == name {
			return s.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("rdmanodestate %s: %w", name, ErrNotFound)
}

func (f *fakeCluster) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	for _, n := range f.w.nodes {
		if n.Name == name {
			return n.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("node %q: %w", name, ErrNotFound)
}

func (f *fakeCluster) ListPods(_ context.Context, ns string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range f.w.pods {
		if ns == "" || p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out, f.err
}

func (f *fakeCluster) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range f.w.pods {
		if p.Namespace == ns && p.Name == name {
			return p.DeepCopy(), f.err
		}
	}
	return nil, fmt.Errorf("pod %s/%s: %w", ns, name, ErrNotFound)
}

// fakeExecer answers doctor's probe script with what a container of each
// pod would print, bw's probe with whether the pod has perftest and what
// gids holds for it (its GID table and addresses, as bwProbeScript prints
// them), and bw's commands as perftest would; a pod it does not know fails
// like a missing pods/exec permission.
type fakeExecer struct {
	probe    map[string]string
	perftest map[string]bool
	timeout  map[string]bool // the pod has timeout -s KILL (bw's probe says so)
	gids     map[string]string
	client   string // what ib_write_bw's client prints; "": perftestClient
}

func (f fakeExecer) newExecer(genericclioptions.RESTClientGetter) (Execer, error) { return f, nil }

func (f fakeExecer) Exec(_ context.Context, ns, pod, container string, cmd []string) (string, error) {
	out, ok := f.probe[ns+"/"+pod]
	if !ok {
		return "", fmt.Errorf("%w: exec in pod %s/%s container %s: pods %q is forbidden: User \"dev\" cannot create resource \"pods/exec\"", ErrForbidden, ns, pod, container, pod)
	}
	timeout := "timeout no\n"
	if f.timeout[ns+"/"+pod] {
		timeout = "timeout yes\n"
	}
	if len(cmd) > 4 && cmd[0] == "timeout" {
		if !f.timeout[ns+"/"+pod] || cmd[1] != "-s" || cmd[2] != "KILL" {
			return "", fmt.Errorf("sh: %q: not found", cmd[:4])
		}
		cmd = cmd[4:]
	}
	switch {
	case len(cmd) == 3 && strings.HasPrefix(cmd[2], bwProbeMark) && f.perftest[ns+"/"+pod]:
		return "perftest yes\n" + timeout + f.gids[ns+"/"+pod], nil
	case len(cmd) == 3 && strings.HasPrefix(cmd[2], bwProbeMark):
		return "perftest no\n" + timeout + f.gids[ns+"/"+pod], nil
	case cmd[0] == "ib_write_bw" && strings.Contains(cmd[len(cmd)-1], "."): // the client names the server's IP
		if f.client != "" {
			return f.client, nil
		}
		return perftestClient, nil
	case cmd[0] == "ib_write_bw":
		return "", nil
	case len(cmd) == 3 && cmd[0] == "sh" && cmd[1] == "-c":
		return out, nil
	}
	return "", fmt.Errorf("unexpected command %q", cmd)
}

const perftestClient = ` #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      3710548          0.00               389.12               0.742188
`

// containers is what the world's running pods print.
var containers = fakeExecer{
	probe: map[string]string{
		"train/worker-0": "dev /dev/infiniband/uverbs0 ok\ndev /dev/infiniband/uverbs1 ok\nmemlock unlimited\nhca =mlx5_0,mlx5_1\ngidindex <unset>\n" +
			"rdma mlx5_0 present\nrdma mlx5_1 present\n",
		"train/worker-1": "dev /dev/infiniband/uverbs1 ok\nmemlock 64\nhca =mlx5_0\ngidindex <unset>\nnetdev net1 up\naddr net1 inet 10.77.0.5/24\n" +
			"rdma mlx5_1 present\n",
		// A node's device nodes with no driver behind them, and a device the
		// container does not see (exclusive mode, not moved in).
		"train/vf-0": "dev /dev/infiniband/uverbs3 err No such device or address\nmemlock 8192\nhca =mlx5_3\ngidindex 1\n" +
			"netdev net1 up\naddr net1 inet 192.168.77.2/24\nrdma mlx5_3 missing\n",
		"default/rxe-client": "dev /dev/infiniband/uverbs0 err Operation not permitted\nmemlock unlimited\nhca =rxe0\ngidindex 3\nnoip\n" +
			"rdma rxe0 present\ngid rxe0 1 0 IB/RoCE v1\ngid rxe0 1 1 RoCE v2\n",
	},
	perftest: map[string]bool{"train/worker-0": true, "train/worker-1": true},
	timeout:  map[string]bool{"train/worker-0": true, "train/worker-1": true},
}

// StateTable is what the API server's table holds: the summary table
// columns of a state are missing where its writer did not publish them.
func (f *fakeCluster) StateTable(context.Context) ([]StateRow, error) {
	if f.noCRD {
		return nil, ErrCRDMissing
	}
	rows := make([]StateRow, 0, len(f.w.states))
	for i := range f.w.states {
		rows = append(rows, tableRow(&f.w.states[i]))
	}
	return rows, f.err
}

// tableRow is s's row in the API server's table: the CRD's columns, the
// summary table as its writer published it (nil when it did not).
func tableRow(s *v1alpha1.RDMANodeState) StateRow {
	st := &s.Status
	return StateRow{Name: s.Name, StateVersion: st.StateVersion, NetnsMode: st.RDMANetnsMode,
		DaemonVersion: st.DaemonVersion, LastUpdate: st.LastUpdate.Time, Table: st.Summary.Table.DeepCopy()}
}

func (f *fakeCluster) NodeNames(context.Context) ([]string, error) {
	names := make([]string, 0, len(f.w.nodes))
	for _, n := range f.w.nodes {
		names = append(names, n.Name)
	}
	return names, f.err
}
