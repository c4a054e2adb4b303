package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testFaultNRIStalledFailClosed: fail closed and memlock while the NRI plugin is not there.
// Pod refused: a chained pod whose sandbox is made while the kube-rdma entry is out of the
// conflist (cni-chain stopped, the entry taken out: the window of a daemon restart or an
// uninstall). Pod memlock: a non-root chained pod with its netdev, printing its
// RLIMIT_MEMLOCK. Each waits in an init container (no device) until the daemon is stopped
// (SIGSTOP: its NRI plugin does not answer; containerd drops it after its plugin request
// timeout and creates containers without it); the kubelet has Allocate's answers by then.
// The netdev hook on the device's CDI spec refuses the first pod's container (its workload
// never runs; the runtime's hook error carries the refusal); the memlock hook gives the
// second its pool's limit, the raise NRI would have made (within the runtime's hard limit
// where this machine cannot raise one). Then the daemon goes on, and the invariant check (the
// refused pod's DEL finds nothing of kube-rdma's to undo).
func testFaultNRIStalledFailClosed(t *testing.T, e *env) {
	c := e.needFaults(t)
	if c.kubeletRoot == "" {
		t.Skip("the phase does not reach the kubelet's root dir")
	}
	runtime := strings.Fields(e.mustHook(t, 10*time.Second, "runtime-memlock"))
	pool := e.memlock[e.chainedPool]
	if len(runtime) != 2 || pool == "" {
		t.Fatalf("runtime-memlock %q, pool %s's memlock %q: want SOFT HARD and a limit", runtime, e.chainedPool, pool)
	}
	wantLimit := raisedTo(runtime[0], pool) + " " + raisedTo(runtime[1], pool)
	orig, without := c.conflistWithout(t)
	f := e.beginFault(t, "NRI plugin stalled", e.chainedPool)

	// Both processes go on whatever happens below; the conflist is the one the test found.
	var chainerStopped, daemonStopped bool
	resume := func() {
		if daemonStopped {
			if _, err := signalDaemon(syscall.SIGCONT); err != nil {
				t.Errorf("resume the daemon: %v", err)
			}
			daemonStopped = false
		}
		if chainerStopped {
			if err := writeConflist(c.conflist, orig); err != nil {
				t.Errorf("restore %s: %v", c.conflist, err)
			}
			if _, err := signalChainer(syscall.SIGCONT); err != nil {
				t.Errorf("resume cni-chain: %v", err)
			}
			chainerStopped = false
		}
	}
	t.Cleanup(resume)

	if _, err := signalChainer(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	chainerStopped = true
	if err := writeConflist(c.conflist, without); err != nil {
		t.Fatal(err)
	}
	// Neither is one of f's pods, which its check waits for to run (2 min for one that never
	// does); the test checks and deletes them itself.
	const refused, limited = "nri-stalled", "nri-stalled-memlock"
	e.createPod(t, gated(e, e.devicePod(f.ns, refused, e.chainedPool, 1)))
	gateRefused := e.waitGate(t, f.ns, refused, c.kubeletRoot)
	resume() // the sandbox is made without kube-rdma: the entry goes back

	mp := gated(e, e.devicePod(f.ns, limited, e.chainedPool, 1))
	uid := int64(1000)
	nonRoot := true
	mp.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &nonRoot}
	mp.Spec.Containers[0].Command = []string{"sh", "-c", memlockScript}
	e.createPod(t, mp)
	gateLimited := e.waitGate(t, f.ns, limited, c.kubeletRoot)

	if _, err := signalDaemon(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	daemonStopped = true
	stopped := time.Now()
	for _, g := range []string{gateRefused, gateLimited} {
		if err := os.WriteFile(g, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var msg string
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		pod, err := e.core.Pods(f.ns).Get(ctx, refused, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.State.Running != nil {
				return fmt.Errorf("pod %s: its device container runs without its netdev", refused)
			}
			// containerd runs createRuntime hooks at the task's creation, in StartContainer:
			// the kubelet reports a StartError; a runtime that runs them in CreateContainer
			// gives a CreateContainerError.
			for _, term := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
				if term != nil && strings.Contains(term.Message, "kube-rdma: pod") {
					msg = term.Reason + ": " + term.Message
					return nil
				}
			}
			if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" {
				msg = w.Reason + ": " + w.Message
				return nil
			}
		}
		return fmt.Errorf("pod %s: its device container not refused yet", refused)
	})
	refusedAfter := time.Since(stopped)
	if err == nil {
		e.checkMemlock(t, f.ns, limited, wantLimit)
	}
	limitedAfter := time.Since(stopped)
	resume()
	if err != nil {
		e.dumpPod(t, f.ns, refused)
		t.Fatal(err)
	}
	want := fmt.Sprintf("kube-rdma: pod %s/%s holds rdma device(s) ", f.ns, refused)
	wantPool := fmt.Sprintf(" of pool %s (chained CNI) but the kube-rdma CNI plugin attached nothing for it", e.chainedPool)
	if !strings.Contains(msg, "hook") || !strings.Contains(msg, want) || !strings.Contains(msg, wantPool) {
		t.Errorf("pod %s: %q; want the runtime's hook error with %q...%q", refused, msg, want, wantPool)
	} else {
		t.Logf("pod %s refused %.1f s after the daemon stopped: %.400s", refused, refusedAfter.Seconds(), msg)
	}
	if out, err := e.logs(t.Context(), f.ns, refused); err == nil && out != "" {
		t.Errorf("pod %s: its workload ran (log %q)", refused, out)
	}
	if why, err := e.loudly(t.Context(), f.ns, refused); err != nil || why == "" {
		t.Errorf("pod %s: no Warning Event says why it does not run (%v)", refused, err)
	}
	e.waitNRIConnected(t)
	del := time.Now()
	e.deletePod(t, f.ns, refused)
	gone := time.Since(del)
	e.deletePod(t, f.ns, limited)
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the daemon stopped (NRI plugin not answering) while two chained pods' containers were created: the one whose sandbox was made with the kube-rdma entry out of the conflist refused by the netdev hook %.1f s after the stop, its workload never ran; the non-root one got RLIMIT_MEMLOCK %s from the memlock hook (containerd's %s) by %.1f s; the refused pod gone %.1f s after its delete",
		refusedAfter.Seconds(), wantLimit, strings.Join(runtime, " "), limitedAfter.Seconds(), gone.Seconds()), out)
}

// raisedTo is the limit the memlock hook leaves: the higher of the runtime's (bytes or
// "unlimited") and the pool's.
func raisedTo(runtime, pool string) string {
	if runtime == "unlimited" || pool == "unlimited" {
		return "unlimited"
	}
	r, _ := strconv.ParseUint(runtime, 10, 64)
	p, _ := strconv.ParseUint(pool, 10, 64)
	return strconv.FormatUint(max(r, p), 10)
}

// gated gives pod an init container (no device) that waits for the file go in its emptyDir
// gate, which the test writes from the host (waitGate), for at most 2 minutes.
func gated(e *env, pod *corev1.Pod) *corev1.Pod {
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "gate", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	pod.Spec.InitContainers = []corev1.Container{{Name: "gate", Image: e.image, ImagePullPolicy: e.pullPolicy,
		Command:      []string{"sh", "-c", `i=0; while [ ! -e /gate/go ] && [ $i -lt 600 ]; do sleep 0.2; i=$((i+1)); done`},
		VolumeMounts: []corev1.VolumeMount{{Name: "gate", MountPath: "/gate"}}}}
	return pod
}

// waitGate waits until the gated pod's init container runs (its sandbox is made and the
// kubelet has its devices) and returns the host path of the file that opens its gate.
func (e *env) waitGate(t *testing.T, ns, name, kubeletRoot string) string {
	t.Helper()
	var uid string
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		pod, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := pod.Status.InitContainerStatuses; len(s) == 1 && s[0].State.Running != nil {
			uid = string(pod.UID)
			return nil
		}
		return fmt.Errorf("pod %s: its init container is not running yet", name)
	})
	if err != nil {
		e.dumpPod(t, ns, name)
		t.Fatal(err)
	}
	return filepath.Join(kubeletRoot, "pods", uid, "volumes", "kubernetes.io~empty-dir", "gate", "go")
}

// conflistWithout reads the node's conflist and returns it as it is and without the
// kube-rdma entry.
func (c *faultsConfig) conflistWithout(t *testing.T) (orig, without []byte) {
	t.Helper()
	orig, err := os.ReadFile(c.conflist)
	if err != nil {
		t.Fatal(err)
	}
	without, err = json.MarshalIndent(withoutKubeRDMA(t, c.conflist, orig), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return orig, without
}

// writeConflist replaces the conflist at path by b, atomically, and makes the runtime load it
// again. containerd reloads its CNI configuration on the events of its directory but
// ignores a Create, which is all a file renamed in from outside makes; a file created and
// removed in the directory (one libcni does not load) gives it the Remove it acts on. Then
// a moment for the reload.
func writeConflist(path string, b []byte) error {
	if err := writeAtomic(path, b, 0o644); err != nil {
		return err
	}
	nudge := filepath.Join(filepath.Dir(path), ".e2e-reload")
	if err := os.WriteFile(nudge, nil, 0o600); err != nil {
		return err
	}
	if err := os.Remove(nudge); err != nil {
		return err
	}
	time.Sleep(time.Second)
	return nil
}
