package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// ErrNoPerftest: a pod's image has no ib_write_bw.
var ErrNoPerftest = errors.New("ib_write_bw not found (the perftest package): use an image with perftest")

// bwFlags are bw's flags.
type bwFlags struct {
	size     int
	duration int
	port     int
}

func newBWCommand(o *Options) *cobra.Command {
	f := bwFlags{size: 65536, duration: 5, port: 18515}
	c := &cobra.Command{
		Use:   "bw POD_A POD_B",
		Short: "Measure RDMA write bandwidth between two pods on their allocated NICs",
		Long: `Runs ib_write_bw (perftest) as the server in POD_A and as the client in POD_B,
each on the first RDMA device kube-rdma allocated to it, with the port's RoCE v2
GID index on Ethernet, the client connecting to POD_A's IP; prints the pair's
devices and the average and peak bandwidth. Both images need ib_write_bw;
both pods must be Running with a kube-rdma allocation.`,
		Example: `  kubectl rdma bw -n training worker-0 worker-1
  kubectl rdma bw worker-0 worker-1 --duration 10 --size 1048576`,
		Args: exactArgs(2, "two pods: POD_A (server) and POD_B (client)"),
		RunE: func(c *cobra.Command, args []string) error { return o.runBW(c.Context(), args[0], args[1], f) },
	}
	c.Flags().IntVar(&f.size, "size", f.size, "message size in bytes (ib_write_bw -s)")
	c.Flags().IntVar(&f.duration, "duration", f.duration, "seconds to run (ib_write_bw -D)")
	c.Flags().IntVar(&f.port, "port", f.port, "TCP port of the out-of-band exchange (ib_write_bw -p)")
	return c
}

// bwEnd is one side: its pod, container, device and the device's netdev
// (its name in the pod when the CNI plugin renamed it).
type bwEnd struct {
	pod       *corev1.Pod
	container string
	dev       v1alpha1.Device
	netdev    string
	gidIndex  *int
}

func (e bwEnd) String() string {
	s := fmt.Sprintf("%s/%s (node %s, %s", e.pod.Namespace, e.pod.Name, e.pod.Spec.NodeName, e.dev.Name)
	if e.netdev != "" {
		s += " " + e.netdev
	}
	if e.gidIndex != nil {
		s += fmt.Sprintf(", GID index %d", *e.gidIndex)
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
	server, err := bwEndOf(ctx, cl, ns, a)
	if err != nil {
		return err
	}
	client, err := bwEndOf(ctx, cl, ns, b)
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
	for _, e := range []bwEnd{server, client} {
		_, err := ex.Exec(ctx, e.pod.Namespace, e.pod.Name, e.container, []string{"sh", "-c", "command -v ib_write_bw"})
		if errors.Is(err, ErrForbidden) {
			return err
		}
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w (%v)", e.pod.Namespace, e.pod.Name, ErrNoPerftest, err)
		}
	}
	out, err := runPerftest(ctx, ex, server, client, f)
	if err != nil {
		return err
	}
	avg, peak, err := parseBW(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Streams.Out, "server %s\nclient %s\nib_write_bw %d bytes, %ds: %.2f Gb/sec average", server, client, f.size, f.duration, avg)
	if peak > 0 { // ib_write_bw -D reports no peak
		fmt.Fprintf(o.Streams.Out, ", %.2f Gb/sec peak", peak)
	}
	fmt.Fprintln(o.Streams.Out)
	return nil
}

// bwEndOf is pod's first allocated kube-rdma device.
func bwEndOf(ctx context.Context, cl Cluster, ns, name string) (bwEnd, error) {
	pod, err := cl.GetPod(ctx, ns, name)
	if err != nil {
		return bwEnd{}, err
	}
	if len(podResources(pod)) == 0 {
		return bwEnd{}, fmt.Errorf("pod %s/%s has no RDMA device: it asks for no %s* resource", ns, name, resourcePrefix)
	}
	if pod.Status.Phase != corev1.PodRunning {
		return bwEnd{}, fmt.Errorf("pod %s/%s is %s, not Running", ns, name, pod.Status.Phase)
	}
	s, err := stateOf(ctx, cl, pod.Spec.NodeName)
	if err != nil {
		return bwEnd{}, err
	}
	for _, a := range containerAllocs(pod, s) {
		if len(a.devices) > 0 {
			e := bwEnd{pod: pod, container: a.container, dev: a.devices[0]}
			if len(a.netdevs) > 0 && a.netdevs[0] != "" {
				e.netdev = a.netdevs[0]
			} else if len(e.dev.Netdevs) > 0 {
				e.netdev = e.dev.Netdevs[0]
			}
			if len(e.dev.Ports) > 0 && e.dev.LinkLayer == "Ethernet" {
				if e.gidIndex = e.dev.Ports[0].RoCEv2GIDIndex; e.gidIndex == nil {
					return bwEnd{}, fmt.Errorf("pod %s/%s: %s has no RoCE v2 GID (no IP address on its netdev?)", ns, name, e.dev.Name)
				}
			}
			return e, nil
		}
	}
	return bwEnd{}, fmt.Errorf("pod %s/%s has no RDMA device from kube-rdma (no allocation in node %s's state)", ns, name, pod.Spec.NodeName)
}

func perftestArgs(e bwEnd, f bwFlags) []string {
	args := []string{"ib_write_bw", "-d", e.dev.Name, "-s", strconv.Itoa(f.size), "-D", strconv.Itoa(f.duration),
		"-p", strconv.Itoa(f.port), "-F", "--report_gbits"}
	if e.gidIndex != nil {
		args = append(args, "-x", strconv.Itoa(*e.gidIndex))
	}
	return args
}

// runPerftest starts the server, then the client (retried while the
// server is not listening yet), and returns the client's output.
func runPerftest(ctx context.Context, ex Execer, server, client bwEnd, f bwFlags) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(f.duration+60)*time.Second)
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

// parseBW reads the result line under ib_write_bw's "#bytes #iterations
// BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]" header.
func parseBW(out string) (avg, peak float64, err error) {
	header := false
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "#bytes" {
			header = true
			continue
		}
		if header && len(f) >= 4 {
			p, perr := strconv.ParseFloat(f[2], 64)
			a, aerr := strconv.ParseFloat(f[3], 64)
			if perr == nil && aerr == nil {
				return a, p, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("no bandwidth in ib_write_bw's output: %q", strings.TrimSpace(out))
}
