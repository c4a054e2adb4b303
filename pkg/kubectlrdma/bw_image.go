package kubectlrdma

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// ErrBWContainer: the ephemeral container bw --image added to a pod did not
// start (its image could not be pulled, the runtime refused it, it ended).
var ErrBWContainer = errors.New("bw's ephemeral container did not start")

// Debugger adds an ephemeral container to a running pod, through the
// pods/ephemeralcontainers subresource, as kubectl debug does. An ephemeral
// container shares its pod's network namespace, so it sees the NICs the CNI
// plugin moved there, whatever the pod's own image holds.
type Debugger interface {
	AddEphemeral(ctx context.Context, namespace, pod string, c corev1.EphemeralContainer) error
}

type kubeDebugger struct{ core kubernetes.Interface }

// NewDebugger is the Debugger of the kubeconfig the flags name.
func NewDebugger(g genericclioptions.RESTClientGetter) (Debugger, error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	core, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kubeDebugger{core: core}, nil
}

func (k kubeDebugger) AddEphemeral(ctx context.Context, ns, name string, c corev1.EphemeralContainer) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := k.core.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, c)
		_, err = k.core.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, name, p, metav1.UpdateOptions{})
		return err
	})
	return ephemeralError(ns, name, c.Name, err)
}

// ephemeralError names what --image needs when the API server refuses the
// container: RBAC on the subresource, or the namespace's Pod Security level
// (a privileged container needs "privileged").
func ephemeralError(ns, pod, container string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w: add ephemeral container %s to pod %s/%s: %s: --image needs update on pods/ephemeralcontainers, and a namespace whose Pod Security level lets a container be privileged",
			ErrForbidden, container, ns, pod, err.Error())
	case apierrors.IsNotFound(err):
		return fmt.Errorf("pod %s/%s: %w", ns, pod, ErrNotFound)
	}
	return fmt.Errorf("add ephemeral container %s to pod %s/%s: %w", container, ns, pod, err)
}

// bwContainerWait is how long bw --image waits for its ephemeral container
// to run: an image pull on the node included.
var bwContainerWait = 2 * time.Minute

// bwDoneFile is what bw creates in its ephemeral container when it is done
// with it: the container's loop then exits.
const bwDoneFile = "/tmp/kube-rdma-bw-done"

// bwContainer is the ephemeral container bw --image adds to a pod: the
// image, privileged (it opens the node's RDMA device nodes, which an
// ephemeral container is not allocated, and CAP_IPC_LOCK lifts the
// locked-memory limit perftest's buffers need), running a shell loop that
// ends when bw creates bwDoneFile or after life, whichever is first: a
// container cannot be removed from a pod, but it can end.
func bwContainer(image string, life time.Duration) corev1.EphemeralContainer {
	loop := `i=0; while [ ! -e ` + bwDoneFile + ` ] && [ "$i" -lt ` + strconv.Itoa(int(life.Seconds())) + ` ]; do sleep 1; i=$((i+1)); done`
	return corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
		Name:                     "rdma-bw-" + utilrand.String(5),
		Image:                    image,
		Command:                  []string{"sh", "-c", loop},
		SecurityContext:          &corev1.SecurityContext{Privileged: ptr.To(true)},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}}
}

// bwInImage adds a bwContainer of image to e's pod, waits for it to run and
// makes it e's container.
func bwInImage(ctx context.Context, cl Cluster, dbg Debugger, e *bwEnd, image string, life time.Duration) error {
	c := bwContainer(image, life)
	ns, pod := e.pod.Namespace, e.pod.Name
	if err := dbg.AddEphemeral(ctx, ns, pod, c); err != nil {
		return err
	}
	if err := waitEphemeral(ctx, cl, ns, pod, c.Name, bwContainerWait); err != nil {
		return err
	}
	e.container = c.Name
	return nil
}

// waitFailed are the waiting reasons after which a container does not start
// without a change by someone: bw says so at once instead of waiting.
var waitFailed = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// waitEphemeral waits up to wait for pod's ephemeral container name to run.
func waitEphemeral(ctx context.Context, cl Cluster, ns, pod, name string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	t := time.NewTicker(bwStatePoll)
	defer t.Stop()
	last := "not started yet"
	for {
		p, err := cl.GetPod(ctx, ns, pod)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if p != nil {
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.Name != name {
					continue
				}
				switch st := s.State; {
				case st.Running != nil:
					return nil
				case st.Terminated != nil:
					return fmt.Errorf("%w: pod %s/%s container %s (image %s) ended: %s, exit %d %s",
						ErrBWContainer, ns, pod, name, s.Image, st.Terminated.Reason, st.Terminated.ExitCode, st.Terminated.Message)
				case st.Waiting != nil:
					last = st.Waiting.Reason
					if st.Waiting.Message != "" {
						last += ": " + st.Waiting.Message
					}
					if waitFailed[st.Waiting.Reason] {
						return fmt.Errorf("%w: pod %s/%s container %s (image %s): %s", ErrBWContainer, ns, pod, name, s.Image, last)
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("%w: pod %s/%s container %s not running after %s (%s)", ErrBWContainer, ns, pod, name, wait, last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}
