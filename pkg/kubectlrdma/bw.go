package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// ErrNoPerftest: a pod's image has no ib_write_bw.
var ErrNoPerftest = errors.New("ib_write_bw not found (the perftest package): use an image with perftest")

// ErrNoWrites: ib_write_bw ran its duration and completed no RDMA write.
var ErrNoWrites = errors.New("ib_write_bw completed no RDMA write")

// ErrStateBehind: the node's state, last written before the pod's
// containers started, does not list the pod's allocation yet, and was not
// written again within bw's --wait.
var ErrStateBehind = errors.New("the node's state was not written since the pod started")

// bwStatePoll is how often bw re-reads a node state it waits for.
var bwStatePoll = time.Second

// bwFlags are bw's flags.
type bwFlags struct {
	size      int
	duration  int
	port      int
	qpTimeout int
	wait      time.Duration
	image     string // run perftest in an ephemeral container of this image
}

func newBWCommand(o *Options) *cobra.Command {
	f := bwFlags{size: 65536, duration: 5, port: 18515, wait: time.Minute}
	c := &cobra.Command{
		Use:   "bw POD_A POD_B",
		Short: "Measure RDMA write bandwidth between two pods on their allocated NICs",
		Long: `Runs ib_write_bw (perftest) as the server in POD_A and as the client in POD_B,
each on the first RDMA device kube-rdma allocated to it, under the device's and
netdev's names in the pod (a soft-RoCE device the CNI plugin re-created there
may have another name), the client connecting to POD_A's IP; prints the pair's
devices and the average and peak bandwidth. Both pods must be Running with a
kube-rdma allocation: a device of a kube-rdma resource, else one of a claim of
kube-rdma's DRA driver prepared for the pod (its first device, in the first
container that names the claim; the node's name of the device, which the pod
must see under that name).

Where perftest runs: by default in each pod's container that holds the device,
whose image then needs ib_write_bw. With --image IMAGE, bw adds an ephemeral
container of IMAGE to each pod instead (as kubectl debug does) and runs
perftest there, so the pods' own images need nothing: it shares the pod's
network namespace (the netdev and, in exclusive RDMA netns mode, the RDMA
device the CNI plugin moved there), and runs privileged to open the node's
RDMA device nodes and lock the memory perftest registers. IMAGE needs sh,
sleep and ib_write_bw (any image with Debian's or Ubuntu's perftest package).
This takes update on pods/ephemeralcontainers and a namespace whose Pod
Security level lets a container be privileged. An ephemeral container cannot
be removed from its pod: each run leaves one more, ended, in the pod's spec
and status (it ends when bw is done, or on its own after the run's deadline). A pod whose containers
started after its node's state was last written is not in that state yet (the
daemon writes it within seconds): bw waits up to --wait for the state to list
it, then fails saying so. bw waits the duration and a minute for perftest on
both sides; each side runs under "timeout -s KILL" of that time in
its pod (coreutils or busybox 1.30+), so a run bw gives up on leaves no process
behind (a pod without timeout gets a note on stderr).

On Ethernet (RoCE) each side uses a RoCE v2 GID index read in its own pod: the
GID of an IPv4 address of the pod's netdev, else the pod's first RoCE v2 IPv4
GID, else the node state's index (read on the host); the output says which.

--qp-timeout N sets the QP's retransmit timeout to 4.096 us * 2^N (ib_write_bw
-u; perftest's default is 14, 67 ms). Soft-RoCE under software emulation (qemu
without KVM) can take longer than that to ack, and spurious retransmits then
make runs report 0; 18 (about 1 s) avoids that.`,
		Example: `  kubectl rdma bw -n training worker-0 worker-1
  kubectl rdma bw worker-0 worker-1 --duration 10 --size 1048576
  kubectl rdma bw rxe-a rxe-b --qp-timeout 18   # soft-RoCE on emulated nodes
  kubectl rdma bw worker-0 worker-1 --image registry.example.com/perftest:bookworm   # images without perftest`,
		Args: exactArgs(2, "two pods: POD_A (server) and POD_B (client)"),
		RunE: func(c *cobra.Command, args []string) error {
			if f.qpTimeout < 0 || f.qpTimeout > 31 {
				return cli.Usagef("--qp-timeout %d: want 0 (perftest's default) to 31", f.qpTimeout)
			}
			if f.wait < 0 {
				return cli.Usagef("--wait %s: want 0 (do not wait) or more", f.wait)
			}
			return o.runBW(c.Context(), args[0], args[1], f)
		},
	}
	c.Flags().IntVar(&f.size, "size", f.size, "message size in bytes (ib_write_bw -s)")
	c.Flags().IntVar(&f.duration, "duration", f.duration, "seconds to run (ib_write_bw -D)")
	c.Flags().IntVar(&f.port, "port", f.port, "TCP port of the out-of-band exchange (ib_write_bw -p)")
	c.Flags().IntVar(&f.qpTimeout, "qp-timeout", f.qpTimeout, "QP retransmit timeout exponent, 4.096 us * 2^N (ib_write_bw -u); 0: perftest's default (14); 18 under software emulation")
	c.Flags().DurationVar(&f.wait, "wait", f.wait, "how long to wait for a node's state to list a pod that started after the state's last write (0: do not wait)")
	c.Flags().StringVar(&f.image, "image", "", "run ib_write_bw in a privileged ephemeral container of this image added to each pod, not in the pods' own containers (the image needs sh, sleep and ib_write_bw)")
	return c
}

// bwEnd is one side: its pod and container, the device as the node state
// describes it, the device's and netdev's names in the pod, and the GID
// index perftest uses there.
type bwEnd struct {
	pod       *corev1.Pod
	container string
	dev       v1alpha1.Device
	podDev    string // the device's name in the pod (-d)
	netdev    string // its netdev's name in the pod
	port      int
	stateGID  *int // the node state's RoCE v2 GID index (the host's table)
	gidIndex  *int
	gidFrom   string // how gidIndex was chosen
	timeout   bool   // the pod runs `timeout -s KILL SECS CMD` (the probe tried it)
}

func (e bwEnd) String() string {
	s := fmt.Sprintf("%s/%s (node %s, %s", e.pod.Namespace, e.pod.Name, e.pod.Spec.NodeName, e.podDev)
	if e.podDev != e.dev.Name {
		s += " (" + e.dev.Name + " on the node)"
	}
	if e.netdev != "" {
		s += " " + e.netdev
	}
	if e.gidIndex != nil {
		s += fmt.Sprintf(", GID index %d (%s)", *e.gidIndex, e.gidFrom)
	}
	return s + ")"
}

func (o *Options) runBW(ctx context.Context, a, b string, f bwFlags) error {
	cl, err := o.cluster()
	if err != nil {
		return err
	}
	ns, err := o.namespace()
	if err != nil {
		return err
	}
	server, err := o.bwEndWait(ctx, cl, ns, a, f.wait)
	if err != nil {
		return err
	}
	client, err := o.bwEndWait(ctx, cl, ns, b, f.wait)
	if err != nil {
		return err
	}
	if server.pod.Status.PodIP == "" {
		return fmt.Errorf("pod %s/%s has no IP yet", ns, a)
	}
	ex, err := o.NewExecer(o.flags)
	if err != nil {
		return err
	}
	if f.image != "" {
		newDebugger := o.NewDebugger
		if newDebugger == nil {
			newDebugger = NewDebugger
		}
		dbg, err := newDebugger(o.flags)
		if err != nil {
			return err
		}
		// Long enough for the other side's container to start, both probes and
		// perftest; bw ends it sooner when it is done.
		life := 2*bwContainerWait + bwDeadline(f) + time.Minute
		var started []bwEnd
		defer func() {
			for _, e := range started {
				o.bwContainerDone(ex, e)
			}
		}()
		for _, e := range []*bwEnd{&server, &client} {
			if err := bwInImage(ctx, cl, dbg, e, f.image, life); err != nil {
				return err
			}
			started = append(started, *e)
			fmt.Fprintf(o.Streams.ErrOut, "%s/%s: ephemeral container %s (image %s) running\n",
				escapeString(e.pod.Namespace), escapeString(e.pod.Name), e.container, escapeString(f.image))
		}
	}
	for _, e := range []*bwEnd{&server, &client} {
		if err := probeEnd(ctx, ex, e); err != nil {
			return err
		}
		if !e.timeout {
			fmt.Fprintf(o.Streams.ErrOut, "note: %s/%s has no `timeout -s KILL` (coreutils or busybox 1.30+): an ib_write_bw that bw gives up on after %s keeps running in it\n",
				escapeString(e.pod.Namespace), escapeString(e.pod.Name), bwDeadline(f))
		}
	}
	out, err := runPerftest(ctx, ex, server, client, f)
	if err != nil {
		return err
	}
	r, err := parseBW(out)
	if err != nil {
		return err
	}
	if r.writes == 0 {
		return fmt.Errorf("%s/%s -> %s/%s, %ds: %w", client.pod.Namespace, client.pod.Name,
			server.pod.Namespace, server.pod.Name, f.duration, ErrNoWrites)
	}
	fmt.Fprintf(o.Streams.Out, "server %s\nclient %s\nib_write_bw %d bytes, %ds: %.2f Gb/sec average", escapeString(server.String()), escapeString(client.String()), f.size, f.duration, r.avg)
	if r.peak > 0 { // ib_write_bw -D reports no peak
		fmt.Fprintf(o.Streams.Out, ", %.2f Gb/sec peak", r.peak)
	}
	// ib_write_bw prints two decimals: a slow link (soft-RoCE in an emulated guest) reads
	// 0.00 Gb/sec while its writes went through; the count says they did.
	fmt.Fprintf(o.Streams.Out, ", %d writes\n", r.writes)
	return nil
}

// bwContainerDone ends e's ephemeral container (bwInImage's): its loop
// exits once bwDoneFile exists. A failure is said on stderr only: the
// container ends on its own at the end of its life.
func (o *Options) bwContainerDone(ex Execer, e bwEnd) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := ex.Exec(ctx, e.pod.Namespace, e.pod.Name, e.container, []string{"touch", bwDoneFile}); err != nil {
		fmt.Fprintf(o.Streams.ErrOut, "note: could not end ephemeral container %s of %s/%s (it ends on its own): %s\n",
			e.container, escapeString(e.pod.Namespace), escapeString(e.pod.Name), escapeString(err.Error()))
	}
}

// bwEndWait is bwEndOf, re-read every bwStatePoll for up to wait while the
// node's state is older than the pod's containers: the daemon lists a pod's
// allocation in its next write after the container starts (its poll of the
// kubelet, 10 s by default, and a write that can take longer on a loaded API
// server), and a bw run right after the pods turned Running would otherwise
// fail on a pod that is fine.
func (o *Options) bwEndWait(ctx context.Context, cl Cluster, ns, name string, wait time.Duration) (bwEnd, error) {
	e, err := bwEndOf(ctx, cl, ns, name)
	if !errors.Is(err, ErrStateBehind) || wait <= 0 {
		return e, err
	}
	fmt.Fprintf(o.Streams.ErrOut, "waiting up to %s for node %s's state to list %s/%s: %v\n",
		wait, escapeString(e.pod.Spec.NodeName), escapeString(ns), escapeString(name), err)
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(bwStatePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return bwEnd{}, fmt.Errorf("%w, and not within --wait %s: the daemon on node %s may be stuck or gone (kubectl rdma doctor -n %s %s)",
					err, wait, e.pod.Spec.NodeName, ns, name)
			}
			return bwEnd{}, ctx.Err()
		case <-t.C:
		}
		if e, err = bwEndOf(ctx, cl, ns, name); !errors.Is(err, ErrStateBehind) {
			return e, err
		}
	}
}

// bwEndOf is pod's first allocated kube-rdma device, named as the pod sees
// it when the CNI plugin attached it (Allocation.Attached).
func bwEndOf(ctx context.Context, cl Cluster, ns, name string) (bwEnd, error) {
	pod, err := cl.GetPod(ctx, ns, name)
	if err != nil {
		return bwEnd{}, err
	}
	if len(podResources(pod)) == 0 && len(pod.Spec.ResourceClaims) == 0 {
		return bwEnd{}, fmt.Errorf("pod %s/%s has no RDMA device: it asks for no %s* resource and has no ResourceClaim", ns, name, resourcePrefix)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return bwEnd{}, fmt.Errorf("pod %s/%s is %s, not Running", ns, name, pod.Status.Phase)
	}
	s, err := stateOf(ctx, cl, pod.Spec.NodeName)
	if err != nil {
		return bwEnd{}, err
	}
	for _, a := range s.Status.Allocations {
		if a.Namespace != pod.Namespace || a.Pod != pod.Name || !strings.HasPrefix(a.Resource, resourcePrefix) || len(a.RDMADevices) == 0 {
			continue
		}
		dev := a.RDMADevices[0]
		e := bwEnd{pod: pod, container: a.Container, dev: v1alpha1.Device{Name: dev}, podDev: dev, port: 1}
		if d := device(s, dev); d != nil {
			e.dev = *d
		}
		if len(a.Netdevs) > 0 && a.Netdevs[0] != "" {
			e.netdev = a.Netdevs[0]
		} else if len(e.dev.Netdevs) > 0 {
			e.netdev = e.dev.Netdevs[0]
		}
		if i := slices.IndexFunc(a.Attached, func(at v1alpha1.AttachedDevice) bool { return at.RDMADevice == dev }); i >= 0 {
			if at := a.Attached[i]; at.PodRDMADevice != "" {
				e.podDev = at.PodRDMADevice
			}
			if at := a.Attached[i]; at.PodNetdev != "" {
				e.netdev = at.PodNetdev
			}
		}
		if len(e.dev.Ports) > 0 {
			e.port, e.stateGID = e.dev.Ports[0].Port, e.dev.Ports[0].RoCEv2GIDIndex
		}
		return e, nil
	}
	if e, ok := claimEnd(s, pod); ok {
		return e, nil
	}
	if stateOlderThan(s, pod) {
		// pod is returned for bwEndWait's message.
		return bwEnd{pod: pod}, fmt.Errorf("pod %s/%s has no allocation in node %s's state yet: %w (written %s, the pod's containers started %s)",
			ns, name, pod.Spec.NodeName, ErrStateBehind, s.Status.LastUpdate.UTC().Format(time.RFC3339), podStarted(pod).UTC().Format(time.RFC3339))
	}
	after := ""
	if t := podStarted(pod); !t.IsZero() {
		after = ", after the pod's containers started " + t.UTC().Format(time.RFC3339)
	}
	return bwEnd{}, fmt.Errorf("pod %s/%s has no RDMA device from kube-rdma (no allocation in node %s's state, written %s%s)",
		ns, name, pod.Spec.NodeName, s.Status.LastUpdate.UTC().Format(time.RFC3339), after)
}

// claimEnd is the first device a claim of kube-rdma's DRA driver prepared for pod holds (not
// one of an adminAccess request), in the container that names the claim; ok is false when the
// node's state lists none. The state has no attachment record of a claim's device, so its
// netdev is the node's name of it; the probe's GID rule then takes the pod's first RoCE v2
// IPv4 GID (the netdev the CNI plugin moved into the pod carries the pod's address).
func claimEnd(s *v1alpha1.RDMANodeState, pod *corev1.Pod) (bwEnd, bool) {
	for _, c := range s.Status.Claims {
		if c.Namespace != pod.Namespace || !slices.ContainsFunc(c.Pods, func(p v1alpha1.ClaimPod) bool { return p.UID == string(pod.UID) }) {
			continue
		}
		for _, d := range c.Devices {
			if d.AdminAccess || d.RDMADevice == "" {
				continue
			}
			e := bwEnd{pod: pod, container: claimContainer(pod, c.Name), dev: v1alpha1.Device{Name: d.RDMADevice}, podDev: d.RDMADevice, port: 1}
			if dev := device(s, d.RDMADevice); dev != nil {
				e.dev = *dev
				if len(dev.Netdevs) > 0 {
					e.netdev = dev.Netdevs[0]
				}
				if len(dev.Ports) > 0 {
					e.port, e.stateGID = dev.Ports[0].Port, dev.Ports[0].RoCEv2GIDIndex
				}
			}
			return e, true
		}
	}
	return bwEnd{}, false
}

// claimContainer is the first of pod's containers that names the ResourceClaim claim (through
// the pod's resourceClaims and, for one made from a template, the pod's
// status.resourceClaimStatuses); the pod's first container when none does.
func claimContainer(pod *corev1.Pod, claim string) string {
	var names []string // the pod-level names of claim
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil && *rc.ResourceClaimName == claim {
			names = append(names, rc.Name)
		}
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil && *st.ResourceClaimName == claim {
			names = append(names, st.Name)
		}
	}
	for _, ct := range pod.Spec.Containers {
		for _, rc := range ct.Resources.Claims {
			if slices.Contains(names, rc.Name) {
				return ct.Name
			}
		}
	}
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Name
}

// bwDeadline is how long bw waits for perftest, both sides: its duration
// and a minute for the exchange and setup.
func bwDeadline(f bwFlags) time.Duration { return time.Duration(f.duration+60) * time.Second }

// perftestArgs is e's ib_write_bw command; where the pod has timeout, under
// `timeout -s KILL` of bwDeadline, so that what bw gives up on ends in the
// pod too: an exec's process outlives the exec (the API server closes the
// stream, nothing signals the process), and a server left waiting for its
// client holds the port, a client left retrying a dead peer the CPU.
func perftestArgs(e bwEnd, f bwFlags) []string {
	args := []string{"ib_write_bw", "-d", e.podDev, "-s", strconv.Itoa(f.size), "-D", strconv.Itoa(f.duration),
		"-p", strconv.Itoa(f.port), "-F", "--report_gbits"}
	if e.gidIndex != nil {
		args = append(args, "-x", strconv.Itoa(*e.gidIndex))
	}
	if f.qpTimeout > 0 {
		args = append(args, "-u", strconv.Itoa(f.qpTimeout))
	}
	if e.timeout {
		args = append([]string{"timeout", "-s", "KILL", strconv.Itoa(int(bwDeadline(f).Seconds()))}, args...)
	}
	return args
}

// runPerftest starts the server, then the client (retried while the
// server is not listening yet), and returns the client's output.
func runPerftest(ctx context.Context, ex Execer, server, client bwEnd, f bwFlags) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, bwDeadline(f))
	defer cancel()
	serverDone := make(chan error, 1)
	go func() {
		_, err := ex.Exec(ctx, server.pod.Namespace, server.pod.Name, server.container, perftestArgs(server, f))
		serverDone <- err
	}()
	var out string
	var err error
	for try := 0; try < 10; try++ {
		out, err = ex.Exec(ctx, client.pod.Namespace, client.pod.Name, client.container, append(perftestArgs(client, f), server.pod.Status.PodIP))
		if err == nil || !strings.Contains(out+err.Error(), "Couldn't connect") {
			break
		}
		select {
		case <-ctx.Done():
		case serr := <-serverDone:
			if serr == nil {
				serr = errors.New("exited before the client connected")
			}
			return "", fmt.Errorf("ib_write_bw server in %s/%s: %w", server.pod.Namespace, server.pod.Name, serr)
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return "", fmt.Errorf("ib_write_bw client in %s/%s: %w", client.pod.Namespace, client.pod.Name, err)
	}
	if serr := <-serverDone; serr != nil {
		return "", fmt.Errorf("ib_write_bw server in %s/%s: %w", server.pod.Namespace, server.pod.Name, serr)
	}
	return out, nil
}

// bwResult is ib_write_bw's result line: the RDMA writes completed and the
// bandwidth (Gb/sec, two decimals).
type bwResult struct {
	writes    int64
	avg, peak float64
}

// parseBW reads the result line under ib_write_bw's "#bytes #iterations
// BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]" header.
func parseBW(out string) (bwResult, error) {
	header := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "#bytes" {
			header = true
			continue
		}
		if header && len(f) >= 4 {
			n, nerr := strconv.ParseInt(f[1], 10, 64)
			p, perr := strconv.ParseFloat(f[2], 64)
			a, aerr := strconv.ParseFloat(f[3], 64)
			if nerr == nil && perr == nil && aerr == nil && n >= 0 {
				return bwResult{writes: n, avg: a, peak: p}, nil
			}
		}
	}
	return bwResult{}, fmt.Errorf("no bandwidth in ib_write_bw's output: %q", strings.TrimSpace(out))
}
