package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// memlockScript prints the container's RLIMIT_MEMLOCK as the kernel reports
// it (soft and hard, bytes or "unlimited"), then idles until SIGTERM.
const memlockScript = `trap 'exit 0' TERM
echo "limits $(awk '/^Max locked memory/ {print $4, $5}' /proc/self/limits) uid $(id -u)"
while :; do sleep 2 & wait $!; done
`

// testMemlock: with the chart's nri.enabled, a non-root container given a
// device gets its pool's RLIMIT_MEMLOCK from the daemon's NRI plugin (two
// pools with different limits, the pod annotation lowering one); a container without our devices keeps the runtime's own limit.
// The daemon restarted while pods run leaves them as they were, and a pod
// created after the restart gets the limit again.
func testMemlock(t *testing.T, e *env) {
	limits := e.memlock
	// Two exclusive pools with different limits, the first with 2+ devices (two of
	// its pods run at once).
	var configured, other string
	for _, p := range e.exclusivePools() {
		if l := limits[p.name]; l != "" && configured == "" && p.count >= 2 {
			configured = p.name
		}
	}
	for _, p := range e.exclusivePools() {
		if l := limits[p.name]; l != "" && p.name != configured && l != limits[configured] {
			other = p.name
		}
	}
	if configured == "" || other == "" {
		t.Fatalf("memlock %v: want two exclusive pools with different limits, one with 2+ devices", limits)
	}
	want := limits[configured]
	lower := "67108864" // the annotation lowers it: to 64 MiB from unlimited, else to half
	if b, err := strconv.ParseUint(want, 10, 64); err == nil {
		lower = strconv.FormatUint(b/2, 10)
	}
	runtime := strings.Fields(e.mustHook(t, 10*time.Second, "runtime-memlock"))
	if len(runtime) != 2 {
		t.Fatalf("hook runtime-memlock: %q, want SOFT HARD", runtime)
	}
	if runtime[0] == want || runtime[0] == limits[other] {
		t.Fatalf("containerd's own limit %s equals a pool's (%v): the test could not tell them apart", runtime[0], limits)
	}
	t.Logf("containerd's RLIMIT_MEMLOCK %s %s; pool %s: %s, pool %s: %s", runtime[0], runtime[1], configured, want, other, limits[other])

	ns := e.namespace(t)
	a := e.memlockPod(t, ns, "memlock-a", configured, "")
	e.checkMemlock(t, ns, a, want)
	e.checkMemlock(t, ns, e.memlockPod(t, ns, "memlock-b", other, ""), limits[other])
	e.checkMemlock(t, ns, e.memlockPod(t, ns, "memlock-none", "", ""), strings.Join(runtime, " "))
	lowered := e.memlockPod(t, ns, "memlock-lowered", configured, lower)
	e.checkMemlock(t, ns, lowered, lower)

	// kubectl rdma doctor reports the container's limit (ulimit -l is in KiB).
	e.checkDoctorMemlock(t, ns, a, want)

	e.deletePod(t, ns, lowered)
	e.deletePod(t, ns, "memlock-none")
	first := map[string]corev1.ContainerStatus{}
	for _, name := range []string{a, "memlock-b"} {
		first[name] = e.memlockStatus(t, ns, name)
	}
	e.restartDaemonSet(t)
	e.waitNRIConnected(t)
	for name, was := range first {
		if now := e.memlockStatus(t, ns, name); now.ContainerID != was.ContainerID || now.RestartCount != 0 || now.State.Running == nil {
			t.Errorf("pod %s after the daemon's restart: container %s, %d restarts, %s; before: %s", name, now.ContainerID, now.RestartCount, stateString(now.State), was.ContainerID)
		}
	}
	e.checkDoctorMemlock(t, ns, a, want)
	e.checkMemlock(t, ns, e.memlockPod(t, ns, "memlock-after", configured, ""), want)
}

// memlockPod starts a pod running as uid 1000 with one device of pool ("" for
// none), the annotation lowering its limit when lower is set, and returns its
// name.
func (e *env) memlockPod(t *testing.T, ns, name, pool, lower string) string {
	t.Helper()
	pod := e.devicePod(ns, name, pool, 1)
	uid := int64(1000)
	nonRoot := true
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &nonRoot}
	pod.Spec.Containers[0].Command = []string{"sh", "-c", memlockScript}
	if lower != "" {
		pod.Annotations = map[string]string{"memlock.kube-rdma.io/limit": lower}
	}
	e.createPod(t, pod)
	e.waitRunning(t, ns, name)
	return name
}

// checkMemlock waits for the pod's limits line and compares it with want
// ("SOFT HARD", or one value for both).
func (e *env) checkMemlock(t *testing.T, ns, name, want string) {
	t.Helper()
	if !strings.Contains(want, " ") {
		want += " " + want
	}
	var line string
	err := eventually(t.Context(), 30*time.Second, func(ctx context.Context) error {
		out, err := e.logs(ctx, ns, name)
		if err != nil {
			return err
		}
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "limits ") {
				line = strings.TrimSpace(l)
				return nil
			}
		}
		return fmt.Errorf("pod %s printed no limits line yet", name)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := "limits " + want + " uid 1000"; line != got {
		t.Errorf("pod %s: %q, want %q", name, line, got)
	} else {
		t.Logf("pod %s: %s", name, line)
	}
}

// checkDoctorMemlock runs kubectl rdma doctor on the pod until its
// locked-memory line is there (doctor checks a container once the node state
// lists its allocation, which lags the pod's start) and checks it names the
// pod's limit.
func (e *env) checkDoctorMemlock(t *testing.T, ns, name, want string) {
	t.Helper()
	detail := "unlimited"
	if want != "unlimited" {
		b, _ := strconv.ParseUint(want, 10, 64)
		detail = fmt.Sprintf("limited to %d KiB", b/1024)
	}
	var out, got string
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		out, _ = e.kubectlRDMA(t, "doctor", "-n", ns, name)
		got = doctorLines(out)["in container: ulimit -l (locked memory)"]
		if strings.HasPrefix(got, "SKIP") || got == "" {
			return fmt.Errorf("doctor on %s: locked memory %q", name, got)
		}
		return nil
	})
	if err != nil || !strings.Contains(got, detail) {
		t.Errorf("doctor on %s: locked memory %q, want %q (%v)\n%s", name, got, detail, err, out)
		return
	}
	t.Logf("doctor on %s: %s", name, got)
}

func (e *env) memlockStatus(t *testing.T, ns, name string) corev1.ContainerStatus {
	t.Helper()
	pod, err := e.core.Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return container(pod)
}

// waitNRIConnected polls the daemon's /state (daemonState) until its
// NRI plugin is registered with the runtime: containers created before then
// get no adjustment.
func (e *env) waitNRIConnected(t *testing.T) {
	t.Helper()
	url := e.daemonState
	if url == "" {
		t.Fatal("the phase gives no daemon /state URL to wait for NRI")
	}
	start := time.Now()
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var st struct {
			NRI *struct {
				Connected bool   `json:"connected"`
				Reason    string `json:"reason"`
			} `json:"nri"`
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		if st.NRI == nil || !st.NRI.Connected {
			return fmt.Errorf("%s: nri %+v", url, st.NRI)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NRI plugin connected %s after the rollout", time.Since(start).Round(time.Millisecond))
}
