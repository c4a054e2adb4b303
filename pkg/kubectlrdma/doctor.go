package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/internal/cli"
	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// Verdict is a check's outcome.
type Verdict string

// Verdicts, best first.
const (
	Pass Verdict = "pass"
	Warn Verdict = "warn"
	Fail Verdict = "fail"
	Skip Verdict = "skip"
)

// Check is one line of doctor's checklist.
type Check struct {
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	Detail  string  `json:"detail"`
	// Fix says what to do about a warn or fail.
	Fix string `json:"fix,omitempty"`
}

// DoctorReport is what `doctor -o json|yaml` prints.
type DoctorReport struct {
	// Target is "pod/NAMESPACE/NAME" or "node/NAME".
	Target string  `json:"target"`
	Checks []Check `json:"checks"`
}

// ErrChecksFailed is doctor's error when a check failed (exit 1).
var ErrChecksFailed = errors.New("doctor found problems")

func newDoctorCommand(o *Options) *cobra.Command {
	var output string
	f := doctorFlags{staleAfter: 10 * time.Minute}
	c := &cobra.Command{
		Use:   "doctor (POD | pod/POD | node/NODE)",
		Short: "Check what stands between a pod (or a node) and working RDMA",
		Long: `Runs a checklist and prints each check as pass, warn, fail or skip, with a fix
for each warn and fail. For a node: its daemon's RDMANodeState is present,
readable and fresh, the pools file has no errors, each pool is advertised in the
node's allocatable, devices are healthy, the RDMA netns mode suits each pool's
mode. For a pod: it is scheduled and asks for a kube-rdma resource, the node
checks of its node, each requested resource is a pool there, the kubelet's
allocation is in the state and its devices are healthy, and the device health
the kubelet reports in the pod's status; then, through exec in
each container that has kube-rdma devices (pods/exec, /bin/sh in the image;
--no-exec skips them): /dev/infiniband nodes open read-write, the moved netdev
is up with an address, the RoCE v2 GID is there, ulimit -l, and NCCL_IB_HCA,
NCCL_IB_GID_INDEX, UCX_NET_DEVICES and UCX_IB_GID_INDEX match the allocation. Exits 1 when a check
fails.`,
		Example: `  kubectl rdma doctor my-training-pod-0
  kubectl rdma doctor -n training pod/my-training-pod-0
  kubectl rdma doctor node/gpu-node-1
  kubectl rdma doctor node/gpu-node-1 -o json
  kubectl rdma doctor my-training-pod-0 --no-exec`,
		Args: exactArgs(1, "one POD or node/NODE"),
		RunE: func(c *cobra.Command, args []string) error {
			r, err := o.doctor(c.Context(), args[0], f)
			if err != nil {
				return err
			}
			if output == outTable {
				writeChecks(o.Streams.Out, r, o.Color)
			} else if err := writeObject(o.Streams.Out, r, output); err != nil {
				return err
			}
			if n := count(r.Checks, Fail); n > 0 {
				return fmt.Errorf("%w: %d of %d checks failed", ErrChecksFailed, n, len(r.Checks))
			}
			return nil
		},
	}
	c.Flags().DurationVar(&f.staleAfter, "stale-after", f.staleAfter, "warn when the node's RDMANodeState was last updated longer ago than this")
	c.Flags().BoolVar(&f.noExec, "no-exec", false, "skip the checks that exec into the pod's containers")
	addOutputFlag(c, &output, outTable, outJSON, outYAML)
	return c
}

// doctorFlags are doctor's own flags.
type doctorFlags struct {
	staleAfter time.Duration
	noExec     bool
}

func (o *Options) doctor(ctx context.Context, target string, f doctorFlags) (*DoctorReport, error) {
	kind, name, ok := strings.Cut(target, "/")
	if !ok {
		kind, name = "pod", target
	}
	if name == "" {
		return nil, cli.Usagef("doctor: %q names no object: want POD, pod/POD or node/NODE", target)
	}
	cl, err := o.cluster()
	if err != nil {
		return nil, err
	}
	switch kind {
	case "node", "nodes", "no":
		node, err := cl.GetNode(ctx, name)
		if err != nil {
			return nil, err
		}
		r := &DoctorReport{Target: "node/" + name}
		s, err := stateOf(ctx, cl, name)
		r.Checks, err = nodeChecks(node, s, err, o.Now(), f.staleAfter)
		return r, err
	case "pod", "pods", "po":
		ns, err := o.namespace()
		if err != nil {
			return nil, err
		}
		pod, err := cl.GetPod(ctx, ns, name)
		if err != nil {
			return nil, err
		}
		r := &DoctorReport{Target: "pod/" + ns + "/" + name}
		r.Checks, err = o.podDoctor(ctx, cl, pod, f)
		return r, err
	}
	return nil, cli.Usagef("doctor: %q: want POD, pod/POD or node/NODE", target)
}

func (o *Options) podDoctor(ctx context.Context, cl Cluster, pod *corev1.Pod, f doctorFlags) ([]Check, error) {
	res := podResources(pod)
	checks := podPreChecks(pod, res, nil)
	// A pod with ResourceClaims may hold NICs of kube-rdma's DRA driver: the node's state
	// lists the claims prepared there with their pods, which decides.
	if pod.Spec.NodeName == "" || (len(res) == 0 && len(pod.Spec.ResourceClaims) == 0) {
		return append(checks, o.containerChecks(ctx, pod, nil, f.noExec)...), nil
	}
	node, err := cl.GetNode(ctx, pod.Spec.NodeName)
	if err != nil {
		return nil, err
	}
	s, serr := stateOf(ctx, cl, node.Name)
	if len(res) == 0 {
		claims := podDRAClaims(pod, s)
		checks = podPreChecks(pod, res, claims)
		if len(claims) == 0 && serr == nil {
			return append(checks, o.containerChecks(ctx, pod, nil, f.noExec)...), nil
		}
	}
	nc, err := nodeChecks(node, s, serr, o.Now(), f.staleAfter)
	if err != nil {
		return nil, err
	}
	checks = append(checks, nc...)
	if serr != nil {
		return append(checks, o.containerChecks(ctx, pod, nil, f.noExec)...), nil
	}
	if len(res) > 0 {
		checks = append(checks, allocationChecks(pod, s)...)
	}
	checks = append(checks, healthCheck(pod, res))
	return append(checks, o.containerChecks(ctx, pod, s, f.noExec)...), nil
}

// podDRAClaims names the claims of kube-rdma's DRA driver prepared for pod (by its UID) on its
// node, as the node's state lists them; none without a state.
func podDRAClaims(pod *corev1.Pod, s *v1alpha1.RDMANodeState) []string {
	if s == nil || pod.UID == "" {
		return nil
	}
	var out []string
	for _, c := range s.Status.Claims {
		if slices.ContainsFunc(c.Pods, func(p v1alpha1.ClaimPod) bool { return p.UID == string(pod.UID) }) {
			out = append(out, c.Name)
		}
	}
	return out
}

func count(checks []Check, v Verdict) int {
	n := 0
	for _, c := range checks {
		if c.Verdict == v {
			n++
		}
	}
	return n
}

var colors = map[Verdict]string{Pass: "\x1b[32m", Warn: "\x1b[33m", Fail: "\x1b[31m", Skip: "\x1b[2m"}

// writeChecks writes one line per check, its fix indented below it, and a
// count of each verdict.
func writeChecks(w io.Writer, r *DoctorReport, color bool) {
	r = &DoctorReport{Target: r.Target, Checks: slices.Clone(r.Checks)}
	escapeAll(r)
	fmt.Fprintf(w, "doctor %s\n", r.Target)
	for _, c := range r.Checks {
		v := strings.ToUpper(string(c.Verdict))
		if color {
			v = colors[c.Verdict] + v + "\x1b[0m"
		}
		fmt.Fprintf(w, "%s  %s: %s\n", v, c.Name, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", c.Fix)
		}
	}
	fmt.Fprintf(w, "%d pass, %d warn, %d fail, %d skip\n", count(r.Checks, Pass), count(r.Checks, Warn), count(r.Checks, Fail), count(r.Checks, Skip))
}

// fromVersion says which daemon wrote s.
func fromVersion(s *v1alpha1.RDMANodeState) string {
	if s.Status.DaemonVersion == "" {
		return "an unnamed daemon version"
	}
	return "daemon " + s.Status.DaemonVersion
}
