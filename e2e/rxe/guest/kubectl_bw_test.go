//go:build rxe_guest

package guest

// `kubectl rdma bw` between two pods whose soft-RoCE devices our CNI binary attached.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kube-rdma/kube-rdma/pkg/agent"
	"github.com/kube-rdma/kube-rdma/pkg/agent/config"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/deviceplugin"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources"
	"github.com/kube-rdma/kube-rdma/pkg/nodestate"
	"github.com/kube-rdma/kube-rdma/pkg/nodewatch"
	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

const (
	bwNamespace = "e2e"
	bwNode      = "rxe-node"
	bwResource  = "rdma.kube-rdma.io/rxe"
)

// bwPod is one pod of the bw test: its name, netns, sandbox ID, the device it was
// allocated and its address.
type bwPod struct {
	name, netns, id, dev, cidr string
	ep                         endpoint // filled after ADD
}

// TestKubectlBWBetweenCNIPods runs the real `kubectl rdma bw` code (kubectlrdma.Execute) between
// two "pods": network namespaces whose soft-RoCE devices our CNI binary attached (moved the
// netdev in as net1, re-created the rxe device on it there), as a runtime would.
//
// Two stand-ins replace what a cluster would serve, because a kube-apiserver and a kubelet
// under TCG are too slow for CI: the Cluster (API server) serves the two Pods (Running, PodIP =
// the pod netns's address) and the node's RDMANodeState, and the Execer (pods/exec) runs each
// command inside the pod's netns with `ip netns exec`. The state is built by the daemon's own
// nodestate.Build from a real discovery scan of the guest (taken before the pods, as the
// device plugin saw the node when it allocated), the allocations a kubelet would report, and
// the CNI binary's real attachment records (attachment.Store.Records). Everything bw does
// itself is real: finding each pod's device and its pod-side names, the in-pod GID probe,
// ib_write_bw on both ends over the rxe devices, parsing the result.
//
// It logs bw's output and writes the figure line to $KUBE_RDMA_OUT_DIR/kubectl-bw.txt.
func TestKubectlBWBetweenCNIPods(t *testing.T) {
	requireGuest(t)
	bin := requireBinary(t, "KUBE_RDMA_CNI_BIN", "./cmd/cni")
	tool(t, "ib_write_bw")
	const ifname = "net1"

	mustRun(t, "", "ip", "link", "add", "name", "kbh0", "type", "veth", "peer", "name", "kbh1")
	cleanupRun(t, "", "ip", "link", "del", "kbh0")
	for _, dev := range []string{"kbh0", "kbh1"} {
		mustRun(t, "", "ip", "link", "set", dev, "up")
	}
	addRXE(t, "", "rxekb0", "kbh0")
	addRXE(t, "", "rxekb1", "kbh1")
	pods := []*bwPod{
		{name: "bw-a", netns: "kbpodA", id: "e2e-kb-a", dev: "rxekb0", cidr: "192.0.2.41/24"},
		{name: "bw-b", netns: "kbpodB", id: "e2e-kb-b", dev: "rxekb1", cidr: "192.0.2.42/24"},
	}
	for _, p := range pods {
		addNetns(t, p.netns)
	}

	// The node as the device plugin saw it when it allocated, before the pods' ADD.
	node, err := discovery.Scanner{SysRoot: "/sys", ProcRoot: "/proc"}.Scan()
	if err != nil {
		t.Fatalf("discovery on the guest's /sys: %v", err)
	}
	t.Logf("before ADD: rxekb0's GID table on the host: %s", gidTable("rxekb0"))
	ids := map[string]string{} // device -> kubelet device ID
	for _, d := range node.RDMADevices {
		ids[d.Name] = deviceplugin.DeviceID(d)
	}

	for _, p := range pods {
		conf := cniNetconf(t, ids[p.dev], p.cidr)
		args := fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=uid-%s", bwNamespace, p.name, p.name)
		if _, _, err := cniExecArgs(t, bin, "ADD", p.id, "/run/netns/"+p.netns, ifname, args, conf); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, _, err := cniExecArgs(t, bin, "DEL", p.id, "/run/netns/"+p.netns, ifname, args, conf); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
		links := mustRun(t, p.netns, "rdma", "link", "show")
		dev, ok := rdmaLinkOnNetdev(links, ifname)
		if !ok {
			t.Fatalf("ADD %s: no RDMA device on %s in netns %s:\n%s", p.id, ifname, p.netns, links)
		}
		ip, _, _ := net.ParseCIDR(p.cidr)
		p.ep = endpoint{NS: p.netns, Netdev: ifname, RXE: dev, IP: ip}
		p.ep.GID = roceV2GID(t, dev, ip) // the pod's port is up with the address's GID
		t.Logf("pod %s: %s on %s, GID table in the pod: %s", p.name, dev, ifname, gidTable(dev))
	}

	st := bwNodeState(t, node, pods, ids)
	for _, a := range st.Status.Allocations {
		d := device(st, a.RDMADevices[0])
		t.Logf("state: %s/%s %s, attached %+v, node state's RoCE v2 GID index %v", a.Namespace, a.Pod, a.RDMADevices, a.Attached, gidIndexOf(d))
	}
	cl := bwCluster{state: st}
	for _, p := range pods {
		cl.pods = append(cl.pods, bwPodObject(p))
	}
	ex := netnsExecer{t: t, netns: map[string]string{}}
	for _, p := range pods {
		ex.netns[p.name] = p.netns
	}

	secs := "2"
	if v, err := strconv.Atoi(os.Getenv("KUBE_RDMA_RXE_BW_SECONDS")); err == nil && v > 0 {
		secs = strconv.Itoa(v)
	}
	var out string
	for attempt, port := 1, 18960; ; attempt, port = attempt+1, port+1 {
		var code int
		code, out = runKubectlRDMA(cl, ex, "bw", "-n", bwNamespace, "bw-a", "bw-b", "--duration", secs, "--qp-timeout", "18", "--port", strconv.Itoa(port))
		t.Logf("kubectl rdma bw (attempt %d): exit %d\n%s", attempt, code, out)
		if code == 0 {
			break
		}
		if attempt == 2 {
			t.Fatalf("kubectl rdma bw failed %d times", attempt)
		}
	}
	// The writes completed say the traffic went through (the Gb/sec figure has two decimals).
	m := regexp.MustCompile(`(?m)^ib_write_bw .*: ([0-9.]+) Gb/sec average.*, ([0-9]+) writes$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no bandwidth line in kubectl rdma bw's output:\n%s", out)
	}
	if n, err := strconv.ParseInt(m[2], 10, 64); err != nil || n <= 0 {
		t.Fatalf("kubectl rdma bw reported %q writes (want > 0):\n%s", m[2], out)
	}
	for i, role := range []string{"server", "client"} {
		p := pods[i]
		want := fmt.Sprintf("%s %s/%s (node %s, %s", role, bwNamespace, p.name, bwNode, p.ep.RXE)
		wantGID := fmt.Sprintf(" %s, GID index %d (in the pod: RoCE v2, %s on %s))", ifname, p.ep.GID, p.ep.IP, ifname)
		if !strings.Contains(out, want) || !strings.Contains(out, wantGID) {
			t.Errorf("output lacks %q ... %q (the pod-side device, netdev and GID index):\n%s", want, wantGID, out)
		}
	}
	t.Logf("KUBECTL_RDMA_BW %s", m[0])
	if dir := os.Getenv("KUBE_RDMA_OUT_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "kubectl-bw.txt"), []byte(m[0]+"\n"), 0o644); err != nil {
			t.Errorf("write bandwidth result: %v", err)
		}
	}

	// A pod whose image has no perftest: the probe, run by a real shell in the pod, says so.
	noPerftest := ex
	noPerftest.path = shOnlyPath(t)
	code, out := runKubectlRDMA(cl, noPerftest, "bw", "-n", bwNamespace, "bw-a", "bw-b", "--qp-timeout", "18")
	t.Logf("kubectl rdma bw without perftest in the images: exit %d\n%s", code, out)
	if code != 1 || !strings.Contains(out, kubectlrdma.ErrNoPerftest.Error()) {
		t.Errorf("without perftest: exit %d, want 1 and %q:\n%s", code, kubectlrdma.ErrNoPerftest, out)
	}
}

// bwNodeState is the RDMANodeState the daemon would publish: nodestate.Build over the scan,
// a pool of the pods' devices, the kubelet's allocations of them, and the CNI binary's records.
func bwNodeState(t *testing.T, node *discovery.Node, pods []*bwPod, ids map[string]string) *v1alpha1.RDMANodeState {
	t.Helper()
	boot, err := attachment.ReadBootID("/proc")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := attachment.Store{Dir: netconf.DefaultStateDir, BootID: boot}.Records()
	if err != nil {
		t.Fatalf("CNI attachment records: %v", err)
	}
	pool := agent.PoolView{Name: "rxe", Resource: bwResource, Mode: config.Exclusive, ByID: map[string][]string{}}
	var ctrs []podresources.ContainerDevices
	for _, p := range pods {
		pool.Members = append(pool.Members, p.dev)
		pool.ByID[ids[p.dev]] = []string{p.dev}
		ctrs = append(ctrs, podresources.ContainerDevices{Namespace: bwNamespace, Pod: p.name, Container: "main",
			Resource: bwResource, DeviceIDs: []string{ids[p.dev]}})
	}
	pool.Capacity, pool.Allocatable = len(pool.Members), len(pool.Members)
	healthy := map[string]bool{}
	for _, d := range node.RDMADevices {
		healthy[d.Name] = d.Healthy()
	}
	view := agent.View{NodeName: bwNode, NetnsMode: rdma.NetnsShared, NUMANodes: 1,
		Snapshot: &nodewatch.Snapshot{Node: node, Healthy: healthy}, Pools: []agent.PoolView{pool}}
	s := &v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: bwNode}, Spec: v1alpha1.RDMANodeStateSpec{NodeName: bwNode},
		Status: nodestate.Build(nodestate.Input{View: view, Containers: ctrs, Attachments: recs, DaemonVersion: "rxe-e2e", Now: time.Now()})}
	for _, p := range pods {
		i := slices.IndexFunc(s.Status.Allocations, func(a v1alpha1.Allocation) bool { return a.Pod == p.name })
		if i < 0 || len(s.Status.Allocations[i].Attached) == 0 {
			t.Fatalf("node state: no allocation with an attached device for pod %s (records: %+v):\n%+v", p.name, recs, s.Status.Allocations)
		}
	}
	return s
}

func bwPodObject(p *bwPod) corev1.Pod {
	ip, _, _ := net.ParseCIDR(p.cidr)
	c := corev1.Container{Name: "main", Image: "perftest", Resources: corev1.ResourceRequirements{
		Limits: corev1.ResourceList{bwResource: *resource.NewQuantity(1, resource.DecimalSI)}}}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: bwNamespace, Name: p.name, UID: types.UID("uid-" + p.name)},
		Spec: corev1.PodSpec{NodeName: bwNode, Containers: []corev1.Container{c}}}
	pod.Status.Phase, pod.Status.PodIP = corev1.PodRunning, ip.String()
	return pod
}

func device(s *v1alpha1.RDMANodeState, name string) *v1alpha1.Device {
	i := slices.IndexFunc(s.Status.Devices, func(d v1alpha1.Device) bool { return d.Name == name })
	if i < 0 {
		return nil
	}
	return &s.Status.Devices[i]
}

func gidIndexOf(d *v1alpha1.Device) string {
	if d == nil || len(d.Ports) == 0 || d.Ports[0].RoCEv2GIDIndex == nil {
		return "none"
	}
	return strconv.Itoa(*d.Ports[0].RoCEv2GIDIndex)
}

// gidTable is the first entries of dev's port 1 GID table, "index type gid" each; empty
// slots (whose type fails to read) are left out.
func gidTable(dev string) string {
	base := filepath.Join(sysInfiniBand, dev, "ports", "1")
	var out []string
	for i := range 8 {
		typ, err := os.ReadFile(filepath.Join(base, "gid_attrs", "types", strconv.Itoa(i)))
		if err != nil {
			continue
		}
		gid, err := os.ReadFile(filepath.Join(base, "gids", strconv.Itoa(i)))
		if err != nil {
			continue
		}
		out = append(out, fmt.Sprintf("%d %s %s", i, strings.TrimSpace(string(typ)), strings.TrimSpace(string(gid))))
	}
	return strings.Join(out, "; ")
}

// runKubectlRDMA runs a kubectl rdma command line against the stand-ins and returns its
// exit status and its stdout and stderr.
func runKubectlRDMA(cl bwCluster, ex netnsExecer, args ...string) (int, string) {
	var out bytes.Buffer
	code := kubectlrdma.Execute(context.Background(), args, kubectlrdma.Options{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out},
		NewCluster: func(genericclioptions.RESTClientGetter) (kubectlrdma.Cluster, error) { return cl, nil },
		NewExecer:  func(genericclioptions.RESTClientGetter) (kubectlrdma.Execer, error) { return ex, nil },
	})
	return code, out.String()
}

// bwCluster stands in for the API server: the two pods and the node's state.
type bwCluster struct {
	pods  []corev1.Pod
	state *v1alpha1.RDMANodeState
}

func (c bwCluster) ListStates(context.Context) ([]v1alpha1.RDMANodeState, error) {
	return []v1alpha1.RDMANodeState{*c.state.DeepCopy()}, nil
}

func (c bwCluster) GetState(_ context.Context, node string) (*v1alpha1.RDMANodeState, error) {
	if node != c.state.Name {
		return nil, fmt.Errorf("rdmanodestate %s: %w", node, kubectlrdma.ErrNotFound)
	}
	return c.state.DeepCopy(), nil
}

// StateTable is the state's row without its table text: nodes reads the
// object (bw does not call it).
func (c bwCluster) StateTable(context.Context) ([]kubectlrdma.StateRow, error) {
	st := c.state.Status
	return []kubectlrdma.StateRow{{Name: c.state.Name, StateVersion: st.StateVersion, NetnsMode: st.RDMANetnsMode,
		DaemonVersion: st.DaemonVersion, LastUpdate: st.LastUpdate.Time}}, nil
}

func (c bwCluster) NodeNames(context.Context) ([]string, error) {
	return []string{bwNode}, nil
}

func (c bwCluster) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	if name != bwNode {
		return nil, fmt.Errorf("node %s: %w", name, kubectlrdma.ErrNotFound)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: bwNode}}, nil
}

func (c bwCluster) ListPods(_ context.Context, ns string) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range c.pods {
		if ns == "" || p.Namespace == ns {
			out = append(out, *p.DeepCopy())
		}
	}
	return out, nil
}

func (c bwCluster) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	for _, p := range c.pods {
		if p.Namespace == ns && p.Name == name {
			return p.DeepCopy(), nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: %w", ns, name, kubectlrdma.ErrNotFound)
}

// netnsExecer stands in for pods/exec: it runs the command in the pod's network namespace
// and returns its stdout; stderr goes into the error, as the API server's exec does. path,
// when set, is the PATH the command is looked up and runs with (an image without perftest).
type netnsExecer struct {
	t     *testing.T
	netns map[string]string // pod -> netns
	path  string
}

func (e netnsExecer) Exec(ctx context.Context, ns, pod, container string, cmd []string) (string, error) {
	n, ok := e.netns[pod]
	if !ok || ns != bwNamespace {
		return "", fmt.Errorf("exec in pod %s/%s: %w", ns, pod, kubectlrdma.ErrNotFound)
	}
	c := exec.CommandContext(ctx, tool(e.t, "ip"), append([]string{"netns", "exec", n}, cmd...)...)
	if e.path != "" {
		c.Env = append(os.Environ(), "PATH="+e.path)
	}
	var out, errOut bytes.Buffer
	c.Stdout, c.Stderr = &out, &errOut
	if err := c.Run(); err != nil {
		return out.String(), fmt.Errorf("exec in pod %s/%s container %s: %w (stderr: %s)", ns, pod, container, err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// shOnlyPath is a directory holding only sh: a PATH on which there is no ib_write_bw.
func shOnlyPath(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err == nil {
		sh, err = filepath.EvalSymlinks(sh)
	}
	if err != nil {
		t.Fatalf("find sh: %v", err)
	}
	dir := t.TempDir()
	if err := os.Symlink(sh, filepath.Join(dir, "sh")); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath(filepath.Join(dir, "ib_write_bw")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s should hold no ib_write_bw: %v", dir, err)
	}
	return dir
}
