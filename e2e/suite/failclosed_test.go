package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testFaultNRIStalledFailClosed: the fail-closed refusal when the NRI plugin cannot refuse.
// A chained pod's sandbox is created while the kube-rdma entry is out of the conflist (the
// cni-chain container stopped, the entry taken out: the window of a daemon restart or an
// uninstall), and its device container is created while the daemon is stopped (SIGSTOP: its
// NRI plugin does not answer, and the runtime drops it after its plugin request timeout and
// creates the container without it). The netdev hook on the device's CDI spec refuses the
// container: it does not run, its waiting message is the runtime's hook error carrying the
// refusal, and a Warning Event says so. Then the daemon and cni-chain go on with the entry
// back, and the invariant check (the refused pod is deleted: its DEL finds nothing of
// kube-rdma's to undo).
func testFaultNRIStalledFailClosed(t *testing.T, e *env) {
	c := e.needFaults(t)
	orig, err := os.ReadFile(c.conflist)
	if err != nil {
		t.Fatal(err)
	}
	without, err := json.MarshalIndent(withoutKubeRDMA(t, c.conflist, orig), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	f := e.beginFault(t, "NRI plugin stalled, a pod without its netdev", e.chainedPool)

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
	// The pod's init container (no device) holds its device container back until the
	// daemon is stopped: the kubelet has Allocate's answer by then (admission), so
	// nothing else of the pod needs the daemon.
	p := e.pool(e.chainedPool)
	k := e.poolKind(*p)
	devicePod := k.pod
	k.pod = func(ns, name string) *corev1.Pod {
		pod := devicePod(ns, name)
		pod.Spec.InitContainers = []corev1.Container{{Name: "wait", Image: e.image, ImagePullPolicy: e.pullPolicy, Command: []string{"sleep", "5"}}}
		return pod
	}
	const name = "nri-stalled"
	if err := f.createKind(t.Context(), name, k); err != nil {
		t.Fatal(err)
	}
	err = eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		pod, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := pod.Status.InitContainerStatuses; len(s) == 1 && s[0].State.Running != nil {
			return nil
		}
		return fmt.Errorf("pod %s: its init container is not running yet", name)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox is there, made without kube-rdma: the entry goes back.
	resume()
	if _, err := signalDaemon(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	daemonStopped = true
	stopped := time.Now()

	var msg string
	err = eventually(t.Context(), 40*time.Second, func(ctx context.Context) error {
		pod, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, s := range pod.Status.ContainerStatuses {
			if s.State.Running != nil {
				return fmt.Errorf("pod %s: its device container runs without its netdev", name)
			}
			if w := s.State.Waiting; w != nil && w.Reason == "CreateContainerError" {
				msg = w.Message
				return nil
			}
		}
		return fmt.Errorf("pod %s: its device container not refused yet", name)
	})
	refusedAfter := time.Since(stopped)
	resume()
	if err != nil {
		e.dumpPod(t, f.ns, name)
		t.Fatal(err)
	}
	want := fmt.Sprintf("kube-rdma: pod %s/%s holds rdma device(s) ", f.ns, name)
	wantPool := fmt.Sprintf(" of pool %s (chained CNI) but the kube-rdma CNI plugin attached nothing for it", e.chainedPool)
	if !strings.Contains(msg, "hook") || !strings.Contains(msg, want) || !strings.Contains(msg, wantPool) {
		t.Errorf("pod %s: CreateContainerError %q; want the runtime's hook error with %q...%q", name, msg, want, wantPool)
	} else {
		t.Logf("pod %s refused %.1f s after the daemon stopped: %.300s", name, refusedAfter.Seconds(), msg)
	}
	e.waitNRIConnected(t)
	f.healed = time.Now()
	out := f.check(t)
	f.report(t, fmt.Sprintf("a chained pod's sandbox made with the kube-rdma entry out of the conflist, its device container created while the daemon was stopped (NRI plugin not answering): refused by the netdev hook %.1f s after the stop",
		refusedAfter.Seconds()), out)
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
