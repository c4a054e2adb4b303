package suite

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// followPodLogs streams the log of every container of the chart's namespace (the daemons,
// their installers, the uninstall hook) into dir (E2E_POD_LOGS), one file per pod,
// container and restart, with the kubelet's timestamps, from the phase's install until the
// end of the phase: the kubelet deletes a pod's log with the pod, and helm uninstall
// deletes them all, so without this a daemon's log is gone exactly when a phase's uninstall
// check fails (a daemon killed before it removed its socket and CDI spec). It returns the
// stop to run once the phase has ended; "" dir follows nothing.
func (e *env) followPodLogs(t *testing.T, phase, dir string) (stop func()) {
	if dir == "" {
		return func() {}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("pod logs: %v", err)
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	followed := map[string]bool{}
	follow := func(pod *corev1.Pod, c corev1.ContainerStatus) {
		key := fmt.Sprintf("%s-%s-%s-%d", phase, pod.Name, c.Name, c.RestartCount)
		// A pod first seen terminating is an earlier phase's, whose follower had it.
		if followed[key] || c.State.Running == nil && c.State.Terminated == nil || pod.DeletionTimestamp != nil {
			return
		}
		followed[key] = true
		wg.Go(func() {
			f, err := os.Create(filepath.Join(dir, key+".log"))
			if err != nil {
				return
			}
			defer func() { _ = f.Close() }()
			// Streams end with the container; a stream the API server or kubelet ends early
			// is opened again, from the last second it wrote (lines of that second repeat).
			since := metav1.Time{}
			for ctx.Err() == nil {
				opts := &corev1.PodLogOptions{Container: c.Name, Follow: true, Timestamps: true}
				if !since.IsZero() {
					opts.SinceTime = &since
				}
				rc, err := e.core.Pods(pod.Namespace).GetLogs(pod.Name, opts).Stream(ctx)
				if err != nil {
					return // the pod or container is gone
				}
				n, _ := io.Copy(f, rc)
				_ = rc.Close()
				if n == 0 {
					return
				}
				since = metav1.NewTime(time.Now().Add(-time.Second))
				p, err := e.core.Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil || !running(p, c.Name, c.RestartCount) {
					return
				}
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			list, err := e.core.Pods(e.helm.namespace).List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					for _, c := range append(list.Items[i].Status.InitContainerStatuses, list.Items[i].Status.ContainerStatuses...) {
						follow(&list.Items[i], c)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// running says whether container name of p still runs in the restart it had.
func running(p *corev1.Pod, name string, restarts int32) bool {
	for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if c.Name == name {
			return c.RestartCount == restarts && c.State.Running != nil
		}
	}
	return false
}

// tailPodLogs is the last n lines of every log in dir (followPodLogs) of a container named
// container, each under its file's name.
func tailPodLogs(dir, container string, n int) string {
	if dir == "" {
		return "(none kept: E2E_POD_LOGS unset)"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*-"+container+"-*.log"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		fmt.Fprintf(&b, "%s:\n  %s\n", filepath.Base(f), strings.Join(lines[max(0, len(lines)-n):], "\n  "))
	}
	return b.String()
}

func TestTailPodLogs(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"rxe-cluster-kube-rdma-ab12c-device-plugin-0.log": "l1\nl2\nl3\n",
		"rxe-cluster-kube-rdma-ab12c-install-cni-0.log":   "not a daemon\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := "rxe-cluster-kube-rdma-ab12c-device-plugin-0.log:\n  l2\n  l3\n"
	if got := tailPodLogs(dir, "device-plugin", 2); got != want {
		t.Errorf("tailPodLogs: %q, want %q", got, want)
	}
}

func TestUninstallWait(t *testing.T) {
	for _, tc := range []struct {
		vals []values
		want time.Duration
	}{
		{nil, 2 * time.Minute},
		{[]values{{"devicePlugin": values{"terminationGracePeriodSeconds": 120}}}, 3 * time.Minute},
		{[]values{{"devicePlugin": values{"terminationGracePeriodSeconds": 120}}, {"devicePlugin": values{"terminationGracePeriodSeconds": 300}}}, 6 * time.Minute},
	} {
		if got := uninstallWait(release{values: tc.vals}); got != tc.want {
			t.Errorf("uninstallWait(%v) = %s, want %s", tc.vals, got, tc.want)
		}
	}
}
