package kubectlrdma

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

func TestParseBW(t *testing.T) {
	out := `---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF		Device         : mlx5_0
 GID index       : 3
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             97.43              97.41  		   0.185798
---------------------------------------------------------------------------------------
`
	r, err := parseBW(out)
	if err != nil || r != (bwResult{writes: 5000, avg: 97.41, peak: 97.43}) {
		t.Errorf("parseBW = %+v, %v", r, err)
	}
	// Soft-RoCE in an emulated guest: two decimals of Gb/sec read 0.00, the writes went through.
	slow := " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      37             0.00               0.00   		   0.000007\n"
	if r, err := parseBW(slow); err != nil || r != (bwResult{writes: 37}) {
		t.Errorf("parseBW(slow) = %+v, %v", r, err)
	}
	if _, err := parseBW("Couldn't connect to 10.0.0.1:18515\n"); err == nil {
		t.Error("parseBW accepted output without a result")
	}
}

// retryExecer refuses the first client run as perftest does while the
// server is not listening yet, and records every command.
type retryExecer struct {
	mu        sync.Mutex
	calls     [][]string
	connected chan struct{} // closed when a client run succeeds
}

func (r *retryExecer) Exec(ctx context.Context, _, _, _ string, cmd []string) (string, error) {
	r.mu.Lock()
	r.calls = append(r.calls, cmd)
	n := len(r.calls)
	r.mu.Unlock()
	if cmd[len(cmd)-1] != "10.0.0.1" { // the server serves one client
		select {
		case <-r.connected:
			return "", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if n < 3 {
		return " Couldn't connect to 10.0.0.1:18515\n", errors.New("command terminated with exit code 1")
	}
	close(r.connected)
	return perftestClient, nil
}

// RoCE: both sides get -x with their port's RoCE v2 GID index; the client
// is retried until the server listens.
func TestRunPerftestRoCE(t *testing.T) {
	idx := 3
	end := func(name, ip string) bwEnd {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
		pod.Status.PodIP = ip
		return bwEnd{pod: pod, container: "main", gidIndex: &idx, podDev: "mlx5_3",
			dev: v1alpha1.Device{Name: "mlx5_3", LinkLayer: "Ethernet"}}
	}
	ex := &retryExecer{connected: make(chan struct{})}
	out, err := runPerftest(context.Background(), ex, end("a", "10.0.0.1"), end("b", "10.0.0.2"), bwFlags{size: 4096, duration: 1, port: 18515})
	if err != nil || out != perftestClient {
		t.Fatalf("runPerftest: %q, %v", out, err)
	}
	clients := 0
	for _, c := range ex.calls {
		if !slices.Contains(c, "-x") || c[slices.Index(c, "-x")+1] != "3" || c[slices.Index(c, "-d")+1] != "mlx5_3" {
			t.Errorf("command %q lacks -d mlx5_3 -x 3", c)
		}
		if c[len(c)-1] == "10.0.0.1" {
			clients++
		}
	}
	if clients < 2 {
		t.Errorf("client ran %d times, want a retry after Couldn't connect", clients)
	}
}

// recordingExecer is a fakeExecer that records the ib_write_bw commands.
type recordingExecer struct {
	fakeExecer
	mu         sync.Mutex
	perft      map[string][]string // pod -> its ib_write_bw command
	containers map[string][]string // ns/pod -> the containers bw exec'd in, each once
}

func (r *recordingExecer) Exec(ctx context.Context, ns, pod, container string, cmd []string) (string, error) {
	r.mu.Lock()
	if slices.Contains(cmd, "ib_write_bw") {
		r.perft[pod] = cmd
	}
	if r.containers == nil {
		r.containers = map[string][]string{}
	}
	if k := ns + "/" + pod; !slices.Contains(r.containers[k], container) {
		r.containers[k] = append(r.containers[k], container)
	}
	r.mu.Unlock()
	return r.fakeExecer.Exec(ctx, ns, pod, container, cmd)
}

// rxeWorld: pods a and b on nodes rxe-a and rxe-b, each with the node's
// rxe0 on eth1, which the CNI plugin attached to the pod as net1 and
// re-created there as podDev; the node state's RoCE v2 GID index (the
// host's table) is 1.
func rxeWorld(podDevA, podDevB string) *world {
	const res = "rdma.kube-rdma.io/rxe"
	w := &world{}
	for _, e := range []struct{ pod, node, podDev string }{{"a", "rxe-a", podDevA}, {"b", "rxe-b", podDevB}} {
		idx := 1
		s := v1alpha1.RDMANodeState{ObjectMeta: metav1.ObjectMeta{Name: e.node}, Spec: v1alpha1.RDMANodeStateSpec{NodeName: e.node}}
		s.Status.StateVersion, s.Status.RDMANetnsMode = v1alpha1.StateVersion, "shared"
		s.Status.Devices = []v1alpha1.Device{{Name: "rxe0", Kind: "rxe", LinkLayer: "Ethernet", Netdevs: []string{"eth1"}, Healthy: true,
			Ports: []v1alpha1.Port{{Port: 1, State: "ACTIVE", LinkLayer: "Ethernet", Netdev: "eth1", RoCEv2GIDIndex: &idx}}}}
		s.Status.Pools = []v1alpha1.Pool{pool("rxe", "exclusive", 0, "rxe0")}
		al := alloc("e2e", e.pod, res, []string{"rxe0"}, []string{"rxe0"}, []string{"eth1"})
		al.Attached = []v1alpha1.AttachedDevice{{RDMADevice: "rxe0", PodRDMADevice: e.podDev, Netdev: "eth1", PodNetdev: "net1"}}
		s.Status.Allocations = []v1alpha1.Allocation{al}
		finish(&s)
		w.states = append(w.states, s)
		w.nodes = append(w.nodes, node(e.node, map[string]int64{res: 1}))
		w.pods = append(w.pods, pod("e2e", e.pod, e.node, corev1.PodRunning, map[string]int64{res: 1}))
	}
	return w
}

// GID tables as bwProbeScript prints them: rxe's link-local GIDs, then the
// IPv4 address's RoCE v1 and v2 GIDs.
const (
	gidsLinkLocal = "linklayer Ethernet\n" +
		"gid 0 fe80:0000:0000:0000:0250:56ff:fe00:0001 IB/RoCE v1\n" +
		"gid 1 fe80:0000:0000:0000:0250:56ff:fe00:0001 RoCE v2\n"
	gidsA = gidsLinkLocal +
		"gid 2 0000:0000:0000:0000:0000:ffff:c000:0215 IB/RoCE v1\n" +
		"gid 3 0000:0000:0000:0000:0000:ffff:c000:0215 RoCE v2\n" +
		"addr inet 192.0.2.21/24\naddr inet6 fe80::250:56ff:fe00:1/64\n"
	// gidsB's RoCE v2 IPv4 GIDs are for addresses net1 no longer has.
	gidsB = gidsLinkLocal +
		"gid 5 0000:0000:0000:0000:0000:ffff:c000:0216 RoCE v2\n" +
		"gid 7 0000:0000:0000:0000:0000:ffff:c000:0217 RoCE v2\n" +
		"addr inet 10.0.0.9/24\n"
)

// bw runs each side on the device's and netdev's names in the pod, with the
// RoCE v2 GID index the pod's own table gives (the node state's only when
// the pod lists none), and passes --qp-timeout as -u.
func TestBWUsesPodSideDeviceAndGID(t *testing.T) {
	tests := []struct {
		name             string
		gids             map[string]string
		args             []string
		wantX            map[string]string // pod -> -x
		wantU            string            // "" for no -u
		wantOut          []string
		podDevA, podDevB string
	}{
		{
			name:    "pod GIDs differ from the state's",
			gids:    map[string]string{"e2e/a": gidsA, "e2e/b": gidsB},
			podDevA: "rxe0_net1", podDevB: "rxe0",
			wantX: map[string]string{"a": "3", "b": "5"},
			wantOut: []string{
				"server e2e/a (node rxe-a, rxe0_net1 (rxe0 on the node) net1, GID index 3 (in the pod: RoCE v2, 192.0.2.21 on net1))\n",
				"client e2e/b (node rxe-b, rxe0 net1, GID index 5 (in the pod: first RoCE v2 IPv4 GID, 192.0.2.22))\n",
			},
		},
		{
			name:    "pod lists no IPv4 RoCE v2 GID: the state's, and -u",
			gids:    map[string]string{"e2e/a": gidsLinkLocal, "e2e/b": gidsA},
			podDevA: "rxe0", podDevB: "rxe0",
			args:  []string{"--qp-timeout", "18"},
			wantX: map[string]string{"a": "1", "b": "3"},
			wantU: "18",
			wantOut: []string{
				"server e2e/a (node rxe-a, rxe0 net1, GID index 1 (the node state's: the pod lists no RoCE v2 IPv4 GID))\n",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeCluster{w: rxeWorld(tc.podDevA, tc.podDevB)}
			ex := &recordingExecer{perft: map[string][]string{}, fakeExecer: fakeExecer{
				probe:    map[string]string{"e2e/a": "", "e2e/b": ""},
				perftest: map[string]bool{"e2e/a": true, "e2e/b": true},
				gids:     tc.gids,
			}}
			var out, errOut bytes.Buffer
			code := Execute(context.Background(), append([]string{"bw", "-n", "e2e", "a", "b"}, tc.args...), Options{
				Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
				NewCluster: f.newCluster,
				NewExecer:  func(genericclioptions.RESTClientGetter) (Execer, error) { return ex, nil },
			})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			podDev := map[string]string{"a": tc.podDevA, "b": tc.podDevB}
			for p, x := range tc.wantX {
				cmd := ex.perft[p]
				got := map[string]string{}
				for _, flag := range []string{"-d", "-x", "-u"} {
					if i := slices.Index(cmd, flag); i >= 0 && i+1 < len(cmd) {
						got[flag] = cmd[i+1]
					}
				}
				want := map[string]string{"-d": podDev[p], "-x": x}
				if tc.wantU != "" {
					want["-u"] = tc.wantU
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("pod %s: ib_write_bw %q (-want +got):\n%s", p, cmd, diff)
				}
			}
		})
	}
}

// TestBWKillsInThePod: a side whose pod has timeout runs ib_write_bw under
// timeout -s KILL of bw's own deadline (duration + 60 s), so that what bw
// gives up on ends in the pod too; a side without it runs it bare and bw
// says so on stderr.
func TestBWKillsInThePod(t *testing.T) {
	f := &fakeCluster{w: rxeWorld("rxe0", "rxe0")}
	ex := &recordingExecer{perft: map[string][]string{}, fakeExecer: fakeExecer{
		probe:    map[string]string{"e2e/a": "", "e2e/b": ""},
		perftest: map[string]bool{"e2e/a": true, "e2e/b": true},
		timeout:  map[string]bool{"e2e/a": true},
		gids:     map[string]string{"e2e/a": gidsA, "e2e/b": gidsB},
	}}
	var out, errOut bytes.Buffer
	code := Execute(context.Background(), []string{"bw", "-n", "e2e", "a", "b", "--duration", "7"}, Options{
		Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
		NewCluster: f.newCluster,
		NewExecer:  func(genericclioptions.RESTClientGetter) (Execer, error) { return ex, nil },
	})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := ex.perft["a"]; len(got) < 5 || !slices.Equal(got[:5], []string{"timeout", "-s", "KILL", "67", "ib_write_bw"}) {
		t.Errorf("server: %q, want timeout -s KILL 67 ib_write_bw ...", got)
	}
	if got := ex.perft["b"]; len(got) == 0 || got[0] != "ib_write_bw" {
		t.Errorf("client without timeout: %q, want ib_write_bw ...", got)
	}
	if want := "note: e2e/b has no `timeout -s KILL`"; !strings.Contains(errOut.String(), want) || strings.Contains(errOut.String(), "e2e/a has no") {
		t.Errorf("stderr %q, want the note for e2e/b alone", errOut.String())
	}
}

func TestBWErrors(t *testing.T) {
	tests := []struct {
		name   string
		gids   map[string]string
		args   []string
		client string
		want   error
	}{
		{"device not in the pod", map[string]string{"e2e/a": gidsA, "e2e/b": "nodev\n"}, nil, "", ErrDeviceNotInPod},
		{"no perftest", map[string]string{"e2e/a": gidsA, "e2e/b": gidsA}, nil, "", ErrNoPerftest},
		{"qp timeout out of range", nil, []string{"--qp-timeout", "32"}, "", cli.ErrUsage},
		{"no write completed", map[string]string{"e2e/a": gidsA, "e2e/b": gidsA}, nil,
			" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n 65536      0              0.00               0.00   		   0.000000\n", ErrNoWrites},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeCluster{w: rxeWorld("rxe0", "rxe0")}
			ex := fakeExecer{probe: map[string]string{"e2e/a": "", "e2e/b": ""},
				perftest: map[string]bool{"e2e/a": true, "e2e/b": tc.want != ErrNoPerftest}, gids: tc.gids, client: tc.client}
			o := Options{Streams: genericiooptions.NewTestIOStreamsDiscard(), NewCluster: f.newCluster, NewExecer: ex.newExecer}
			root := NewRootCommand(&o)
			root.SetArgs(append([]string{"bw", "-n", "e2e", "a", "b"}, tc.args...))
			if err := root.ExecuteContext(context.Background()); !errors.Is(err, tc.want) {
				t.Errorf("bw: %v, want %v", err, tc.want)
			}
		})
	}
}

// laggingCluster is a fakeCluster whose node rxe-b state lists pod b's
// allocation only from its catchUp-th GetState of that node on (never
// when catchUp is 0), as the daemon's next write after the container
// started would.
type laggingCluster struct {
	*fakeCluster
	catchUp, getsB int
	behind, caught v1alpha1.RDMANodeState
}

func (l *laggingCluster) GetState(ctx context.Context, name string) (*v1alpha1.RDMANodeState, error) {
	if name != "rxe-b" {
		return l.fakeCluster.GetState(ctx, name)
	}
	l.getsB++
	if l.catchUp > 0 && l.getsB >= l.catchUp {
		return l.caught.DeepCopy(), nil
	}
	return l.behind.DeepCopy(), nil
}

// TestBWWaitsForTheState: a pod whose containers started after its node's
// state was last written is not in it yet; bw waits up to --wait for the
// state to list it (bw run a second after its pods turned Running, on a
// daemon whose write is still retrying, would otherwise fail on good pods),
// fails with ErrStateBehind when it does not, and fails at once on a state
// written after the pod started that lacks it.
func TestBWWaitsForTheState(t *testing.T) {
	defer func(p time.Duration) { bwStatePoll = p }(bwStatePoll)
	bwStatePoll = time.Millisecond
	started := time.Date(2026, 11, 28, 0, 4, 15, 0, time.UTC)
	tests := []struct {
		name      string
		written   time.Time // the lagging state's lastUpdate
		catchUp   int
		args      []string
		want      error // nil: bw succeeds
		wantMsg   string
		wantGetsB int // 0: any
		waitNote  bool
	}{
		{name: "state catches up", written: started.Add(-2 * time.Minute), catchUp: 3, waitNote: true, wantGetsB: 3},
		{name: "state never catches up", written: started.Add(-2 * time.Minute), args: []string{"--wait", "30ms"},
			want: ErrStateBehind, wantMsg: "and not within --wait 30ms: the daemon on node rxe-b may be stuck or gone", waitNote: true},
		{name: "--wait 0", written: started.Add(-2 * time.Minute), catchUp: 2, args: []string{"--wait", "0"},
			want: ErrStateBehind, wantMsg: "pod e2e/b has no allocation in node rxe-b's state yet", wantGetsB: 1},
		{name: "state newer than the pod", written: started.Add(time.Second), catchUp: 2,
			wantMsg: "no allocation in node rxe-b's state, written 2026-11-28T00:04:16Z, after the pod's containers started 2026-11-28T00:04:15Z)", wantGetsB: 1},
		{name: "negative --wait", written: started, args: []string{"--wait", "-1s"}, want: cli.ErrUsage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := rxeWorld("rxe0", "rxe0")
			for i := range w.pods {
				w.pods[i].Status.StartTime = &metav1.Time{Time: started.Add(-time.Minute)}
				w.pods[i].Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main",
					State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(started)}}}}
			}
			l := &laggingCluster{fakeCluster: &fakeCluster{w: w}, catchUp: tc.catchUp}
			for _, s := range w.states {
				if s.Name == "rxe-b" {
					s.Status.LastUpdate = metav1.NewTime(started.Add(5 * time.Second))
					l.caught = *s.DeepCopy()
					s.Status.LastUpdate = metav1.NewTime(tc.written)
					s.Status.Allocations = nil
					l.behind = *s.DeepCopy()
				}
			}
			ex := fakeExecer{probe: map[string]string{"e2e/a": "", "e2e/b": ""},
				perftest: map[string]bool{"e2e/a": true, "e2e/b": true}, gids: map[string]string{"e2e/a": gidsA, "e2e/b": gidsA}}
			var out, errOut bytes.Buffer
			o := Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
				NewCluster: func(genericclioptions.RESTClientGetter) (Cluster, error) { return l, nil }, NewExecer: ex.newExecer}
			root := NewRootCommand(&o)
			root.SetArgs(append([]string{"bw", "-n", "e2e", "a", "b"}, tc.args...))
			err := root.ExecuteContext(context.Background())
			switch {
			case tc.want == nil && tc.wantMsg == "" && err != nil:
				t.Fatalf("bw: %v, want success", err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("bw: %v, want %v", err, tc.want)
			case tc.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tc.wantMsg)):
				t.Fatalf("bw: %v, want an error with %q", err, tc.wantMsg)
			case tc.want == nil && tc.wantMsg != "" && errors.Is(err, ErrStateBehind):
				t.Fatalf("bw: %v: a state written after the pod started is not behind", err)
			}
			if tc.wantGetsB > 0 && l.getsB != tc.wantGetsB {
				t.Errorf("node rxe-b's state read %d times, want %d", l.getsB, tc.wantGetsB)
			}
			if got := strings.Contains(errOut.String(), "waiting up to"); got != tc.waitNote {
				t.Errorf("stderr %q: waiting note %v, want %v", errOut.String(), got, tc.waitNote)
			}
			if tc.want == nil && tc.wantMsg == "" && !strings.Contains(out.String(), "client e2e/b (node rxe-b, rxe0") {
				t.Errorf("output %q lacks the client e2e/b on rxe0", out.String())
			}
		})
	}
}

func TestPickGID(t *testing.T) {
	tests := []struct {
		name    string
		probe   string
		wantIdx int
		wantOK  bool
	}{
		{"address of the netdev", gidsA, 3, true},
		{"no address matches: first IPv4 RoCE v2", gidsB, 5, true},
		{"addresses unknown (no ip in the image)", strings.ReplaceAll(gidsA, "addr ", "x "), 3, true},
		{"link-local only", gidsLinkLocal, 0, false},
		{"RoCE v1 only", "gid 2 0000:0000:0000:0000:0000:ffff:c000:0215 IB/RoCE v1\naddr inet 192.0.2.21/24\n", 0, false},
		{"malformed GID", "gid 3 zz RoCE v2\n", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, why, ok := pickGID(parseBWProbe(tc.probe), "net1")
			if idx != tc.wantIdx || ok != tc.wantOK {
				t.Errorf("pickGID = %d, %q, %v; want %d, %v", idx, why, ok, tc.wantIdx, tc.wantOK)
			}
		})
	}
}

// TestBWClaimPod: a pod whose NIC comes from a claim of kube-rdma's DRA driver (no kube-rdma
// resource; the claim made from a template, named in the pod's status) is an end of bw: the
// claim's device in the container that names the claim, the GID from the pod's own table. An
// adminAccess device of the claim is not used; a pod with a claim the state does not list for
// it fails as one without an allocation.
func TestBWClaimPod(t *testing.T) {
	w := rxeWorld("rxe0", "rxe0")
	st := &w.states[0].Status
	st.Allocations = nil
	a := &w.pods[0]
	a.UID = "uid-a"
	a.Spec.Containers[0].Resources.Limits = nil
	side := corev1.Container{Name: "trainer", Image: "example.com/nccl-tests:1"}
	side.Resources.Claims = []corev1.ResourceClaim{{Name: "nic"}}
	a.Spec.Containers = append(a.Spec.Containers, side)
	a.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "nic", ResourceClaimTemplateName: ptr.To("one-nic")}}
	a.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "nic", ResourceClaimName: ptr.To("a-nic-x7k2q")}}
	st.Claims = []v1alpha1.Claim{{Namespace: "e2e", Name: "a-nic-x7k2q", UID: "claim-1", Pods: []v1alpha1.ClaimPod{{UID: "uid-a"}},
		Devices: []v1alpha1.ClaimDevice{
			{Request: "monitor", Pool: "rxe-a/rxe-dra", Device: "rxe0-admin", RDMADevice: "mlx5_9", AdminAccess: true},
			{Request: "nic", Pool: "rxe-a/rxe-dra", Device: "rxe0", RDMADevice: "rxe0"},
		}}}
	run := func(t *testing.T) (*recordingExecer, string, string, int) {
		f := &fakeCluster{w: w}
		ex := &recordingExecer{perft: map[string][]string{}, fakeExecer: fakeExecer{
			probe:    map[string]string{"e2e/a": "", "e2e/b": ""},
			perftest: map[string]bool{"e2e/a": true, "e2e/b": true},
			gids:     map[string]string{"e2e/a": gidsA, "e2e/b": gidsB},
		}}
		var out, errOut bytes.Buffer
		code := Execute(context.Background(), []string{"bw", "-n", "e2e", "a", "b", "--wait", "0s"}, Options{
			Streams:    genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut},
			NewCluster: f.newCluster,
			NewExecer:  func(genericclioptions.RESTClientGetter) (Execer, error) { return ex, nil },
		})
		return ex, out.String(), errOut.String(), code
	}
	ex, out, errOut, code := run(t)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := "server e2e/a (node rxe-a, rxe0 eth1, GID index 3 (in the pod: RoCE v2, 192.0.2.21 on eth1))\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	if cmd := ex.perft["a"]; !slices.Contains(cmd, "rxe0") || slices.Contains(cmd, "mlx5_9") {
		t.Errorf("server: ib_write_bw %q, want -d rxe0 (not the adminAccess device)", cmd)
	}
	if got := ex.containers["e2e/a"]; !slices.Equal(got, []string{"trainer"}) {
		t.Errorf("server ran in containers %q, want the one that names the claim (trainer)", got)
	}

	st.Claims[0].Pods = []v1alpha1.ClaimPod{{UID: "uid-other"}}
	if _, _, errOut, code := run(t); code == 0 || !strings.Contains(errOut, "pod e2e/a has no RDMA device from kube-rdma") {
		t.Errorf("claim prepared for another pod: exit %d, %q; want no RDMA device from kube-rdma", code, errOut)
	}
}
