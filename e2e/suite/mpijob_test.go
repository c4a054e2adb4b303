package suite

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// The MPI job of the rxe cluster: two ranks in two worker pods on the two nodes, started as
// users start one on Kubernetes without an operator, the way mpi-operator does: a launcher pod
// whose main process is mpirun starts Open MPI's orted in each worker over SSH (a key pair
// from a Secret; the image's dropbear serves it), and orted the rank. The workers ask only for
// a device of the chart's pool and get nothing but what the agent sets; UCX is held to its
// verbs transports (UCX_TLS without tcp), so the job moves its data over RDMA or fails.
//
// mpirun is the launcher's main process, not a `kubectl exec` into a worker: a process exec'd
// into a container gets the runtime's locked-memory limit (8 MiB under containerd) unless the
// NRI plugin is on, and UCX's first registration fails there; the memlock hook raises the
// limit of the container's first process, which dropbear, orted and the ranks inherit.

// mpiPodScript starts a pod of the job: the container's environment (what the device plugin,
// the CDI spec and the runtime set) saved for the orted that SSH starts (an SSH session does
// not carry it; the image's orted-env reads it back), the key pair from the Secret, dropbear
// on port 2222, then idles until SIGTERM.
const mpiPodScript = `trap 'exit 0' TERM
export -p > /tmp/pod-env
mkdir -p /root/.ssh && cp /etc/mpi-ssh/id_ecdsa /etc/mpi-ssh/authorized_keys /root/.ssh/ && chmod 600 /root/.ssh/*
dropbear -R -E -s -p 2222 -P /tmp/dropbear.pid || echo "dropbear failed: $?"
echo "mpi-pod ready UCX_NET_DEVICES=${UCX_NET_DEVICES:-unset}"
while :; do sleep 2 & wait $!; done
`

// mpiSSHPort is dropbear's port in the job's pods.
const mpiSSHPort = 2222

// mpirunArgs is the launcher's mpirun command line, one rank on each of hosts (the workers'
// IPs). Every option is one a user of Open MPI 4.1 over UCX sets: SSH to the
// workers' port with the Secret's key, the launch agent that reads the pod's environment, UCX
// as the point-to-point layer (opal_common_ucx_devices any: Open MPI 4.1 takes UCX only for
// mlx* devices by default), the out-of-band channel on the pods' eth0, and UCX's transports
// held to verbs, its log at info (it names the transport and device of each endpoint).
func mpirunArgs(hosts []string, args ...string) []string {
	var h []string
	for _, ip := range hosts {
		h = append(h, ip+":1")
	}
	cmd := []string{"mpirun", "--allow-run-as-root", "-np", strconv.Itoa(len(hosts)), "-H", strings.Join(h, ","),
		"--mca", "plm_rsh_agent", fmt.Sprintf("ssh -p %d -i /root/.ssh/id_ecdsa -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR", mpiSSHPort),
		"--mca", "orte_launch_agent", "/usr/local/bin/orted-env",
		"--mca", "pml", "ucx", "--mca", "btl", "self", "--mca", "opal_common_ucx_devices", "any",
		"--mca", "oob_tcp_if_include", "eth0", "--mca", "plm_rsh_no_tree_spawn", "1",
		"-x", "UCX_TLS=rc_verbs,ud_verbs,self", "-x", "UCX_LOG_LEVEL=info",
		"mpi-check"}
	return append(cmd, args...)
}

// mpiCheckArgs: 65536 doubles in the allreduce; 20 windows of 8 sends of 64 KiB (ib_write_bw's
// size in the same run) for the point-to-point bandwidth.
var mpiCheckArgs = []string{"65536", "65536", "20", "8"}

var (
	allreduceOK = regexp.MustCompile(`(?m)^allreduce ok rank=(\d+) ranks=(\d+) count=(\d+)$`)
	p2pLine     = regexp.MustCompile(`(?m)^p2p bytes=(\d+) iters=(\d+) window=(\d+) seconds=([0-9.]+) MBps=([0-9.]+)$`)
	// UCX's info line for an endpoint's configuration lists each lane's transport/device.
	ucxLane = regexp.MustCompile(`\b(rc_verbs|ud_verbs|rc_mlx5|ud_mlx5|dc_mlx5|tcp|sysv|posix|cma|self)/([A-Za-z0-9_.:-]+)`)
)

// mpiResult is what mpi-check and UCX printed.
type mpiResult struct {
	ranksOK int                 // ranks whose allreduce checked out
	mbps    float64             // rank 0's point-to-point MB/s
	lanes   map[string][]string // transport -> devices UCX used
}

func parseMPI(out string) (mpiResult, error) {
	r := mpiResult{lanes: map[string][]string{}}
	r.ranksOK = len(allreduceOK.FindAllStringSubmatch(out, -1))
	if strings.Contains(out, "allreduce FAILED") || strings.Contains(out, "p2p FAILED") {
		return r, fmt.Errorf("mpi-check found a wrong result")
	}
	m := p2pLine.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("no p2p line in mpi-check's output")
	}
	r.mbps, _ = strconv.ParseFloat(m[5], 64)
	for _, l := range ucxLane.FindAllStringSubmatch(out, -1) {
		if !slices.Contains(r.lanes[l[1]], l[2]) {
			r.lanes[l[1]] = append(r.lanes[l[1]], l[2])
		}
	}
	return r, nil
}

// rxeHostBW is the host-to-host ib_write_bw of the run (CrossNode's), for the MPI job's ratio.
var rxeHostBW struct {
	sync.Mutex
	gbps float64
}

// testMPIJob: the two-rank MPI job over the pool's devices: the allreduce checked on both
// ranks, UCX's endpoints on the verbs transports of the device, the point-to-point bandwidth
// as a ratio to the host-to-host ib_write_bw of the same run; then the same job with its
// second rank in a pod without the device fails, loudly.
func testMPIJob(t *testing.T, e *env, c rxeClusterDesc) {
	if len(c.nodes) < 2 {
		t.Skipf("one node (%s): the MPI job's ranks run on two", c.nodes[0])
	}
	// Before the workers exist: each takes its node's eth1, which host-bw runs on, into its
	// netns (CrossNode's figure when it ran first).
	host := hostGbps(t, e, c)
	ns := e.namespace(t)
	secret, err := mpiSSHSecret(ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.core.Secrets(ns).Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Secret %s: %v", secret.Name, err)
	}
	pods := []struct {
		name, node, pool string
	}{{"mpi-0", c.nodes[0], rxePool}, {"mpi-1", c.nodes[1], rxePool}, {"mpi-none", c.nodes[1], ""}}
	for _, p := range pods {
		e.createPod(t, mpiPod(e, ns, p.name, p.node, p.pool, c.perfImage, secret.Name))
	}
	ips := map[string]string{}
	for _, p := range pods {
		pod := e.waitRunning(t, ns, p.name)
		ips[p.name] = pod.Status.PodIP
		if err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
			out, err := e.logs(ctx, ns, p.name)
			if err != nil {
				return err
			}
			if strings.Contains(out, "dropbear failed") {
				return fmt.Errorf("pod %s: %s", p.name, out)
			}
			if !strings.Contains(out, "mpi-pod ready") {
				return fmt.Errorf("pod %s not ready yet", p.name)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := kubectlrdma.NewExecer(kubeconfigFlags())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods[:2] {
		ucx, ucxGID, ncclGID := e.waitMPIEnv(t, ex, ns, p.name)
		if want := c.device + ":1"; ucx != want {
			t.Errorf("pod %s: UCX_NET_DEVICES=%q, want %q (the device plugin's)", p.name, ucx, want)
		}
		if ucxGID == "" || ucxGID != ncclGID {
			t.Errorf("pod %s: UCX_IB_GID_INDEX=%q, NCCL_IB_GID_INDEX=%q: want both set by the device plugin, the same", p.name, ucxGID, ncclGID)
		}
	}

	var out string
	var res mpiResult
	for try := 1; ; try++ {
		var took time.Duration
		out, took, err = e.runLauncher(t, ns, fmt.Sprintf("mpi-launch-%d", try), c, secret.Name, ips["mpi-0"], ips["mpi-1"])
		t.Logf("MPI job over mpi-0 (%s) and mpi-1 (%s), try %d, %.1f s: %v\n%s", ips["mpi-0"], ips["mpi-1"], try, took.Seconds(), err, out)
		if err == nil {
			if res, err = parseMPI(out); err == nil {
				break
			}
		}
		if try == 2 { // a starved guest can miss one of the job's timeouts
			t.Fatalf("the MPI job failed twice: %v", err)
		}
	}
	if res.ranksOK != 2 {
		t.Errorf("allreduce checked out on %d ranks, want 2", res.ranksOK)
	}
	verbs := append(append([]string{}, res.lanes["rc_verbs"]...), res.lanes["ud_verbs"]...)
	if len(verbs) == 0 || len(res.lanes["tcp"]) > 0 {
		t.Errorf("UCX's lanes %v: want rc_verbs or ud_verbs on %s:1 and no tcp", res.lanes, c.device)
	}
	for _, d := range verbs {
		if d != c.device+":1" {
			t.Errorf("UCX used %s, want only the pod's %s:1", d, c.device)
		}
	}
	ratio := 0.0
	if host > 0 {
		ratio = res.mbps * 8 / 1000 / host
	}
	t.Logf("MPI job (2 ranks, mpi-0 on %s, mpi-1 on %s): allreduce of %s doubles checked on %d ranks; UCX lanes %v; point-to-point %.2f MB/s (%.3f Gb/s), %.2fx the host-to-host ib_write_bw (%.2f Gb/s)",
		c.nodes[0], c.nodes[1], mpiCheckArgs[0], res.ranksOK, res.lanes, res.mbps, res.mbps*8/1000, ratio, host)

	// The same job with its second rank where the pod has no RDMA device: UCX finds no verbs
	// transport to it, and the job must fail, not fall back to TCP.
	out, took, err := e.runLauncher(t, ns, "mpi-launch-none", c, secret.Name, ips["mpi-0"], ips["mpi-none"])
	t.Logf("MPI job over mpi-0 and mpi-none (no device), %.1f s: %v\n%s", took.Seconds(), err, out)
	if err == nil {
		t.Errorf("the MPI job with a rank in a pod without the device succeeded")
	}
	if r, _ := parseMPI(out); r.ranksOK == 2 {
		t.Errorf("the MPI job with a rank without the device completed its allreduce")
	}
	for _, p := range pods {
		e.deletePod(t, ns, p.name)
	}
}

// runLauncher runs the job's launcher pod (on the first node, no device) with one rank on
// each of hosts, waits until it ends (4 min), and returns its log, how long it ran and an
// error when it failed. The pod is deleted after.
func (e *env) runLauncher(t *testing.T, ns, name string, c rxeClusterDesc, secret string, hosts ...string) (string, time.Duration, error) {
	t.Helper()
	p := mpiPod(e, ns, name, c.nodes[0], "", c.perfImage, secret)
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].Command = []string{"sh", "-c", mpiLauncherScript + shellJoin(mpirunArgs(hosts, mpiCheckArgs...))}
	e.createPod(t, p)
	defer e.deletePod(t, ns, name)
	var pod *corev1.Pod
	err := eventually(t.Context(), 4*time.Minute, func(ctx context.Context) error {
		var err error
		if pod, err = e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("launcher %s: phase %s", name, pod.Status.Phase)
		}
		return nil
	})
	out, lerr := e.logs(t.Context(), ns, name)
	if lerr != nil {
		out = lerr.Error()
	}
	if err != nil {
		return out, 0, err
	}
	took := time.Duration(0)
	if term := container(pod).State.Terminated; term != nil {
		took = term.FinishedAt.Sub(term.StartedAt.Time)
		if term.ExitCode != 0 {
			return out, took, fmt.Errorf("launcher %s: mpirun exited %d", name, term.ExitCode)
		}
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		return out, took, fmt.Errorf("launcher %s: %s", name, pod.Status.Phase)
	}
	return out, took, nil
}

// mpiLauncherScript prefixes the launcher's mpirun: the Secret's key where ssh looks, mpirun
// under a time limit (busybox timeout) as the container's main process.
const mpiLauncherScript = `mkdir -p /root/.ssh && cp /etc/mpi-ssh/id_ecdsa /root/.ssh/ && chmod 600 /root/.ssh/id_ecdsa
exec timeout 180 `

// shellJoin quotes args for sh.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// hostGbps is the host-to-host ib_write_bw of the run: CrossNode's, else run here.
func hostGbps(t *testing.T, e *env, c rxeClusterDesc) float64 {
	rxeHostBW.Lock()
	defer rxeHostBW.Unlock()
	if rxeHostBW.gbps > 0 {
		return rxeHostBW.gbps
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out, err := runHook(ctx, e.hook, "host-bw", c.nodes[0], c.nodes[1], strconv.Itoa(c.bwSeconds))
	if err != nil {
		t.Errorf("host-bw: %v", err)
		return 0
	}
	g, _, err := perftestGbps(out)
	if err != nil {
		t.Errorf("host-bw: %v", err)
		return 0
	}
	rxeHostBW.gbps = g
	return g
}

// waitMPIEnv returns UCX_NET_DEVICES, UCX_IB_GID_INDEX and NCCL_IB_GID_INDEX as the pod
// saved them for the orted that SSH starts ("" for one unset).
func (e *env) waitMPIEnv(t *testing.T, ex kubectlrdma.Execer, ns, pod string) (ucx, ucxGID, ncclGID string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := ex.Exec(ctx, ns, pod, "test", []string{"sh", "-c",
		`. /tmp/pod-env; echo "${UCX_NET_DEVICES}|${UCX_IB_GID_INDEX}|${NCCL_IB_GID_INDEX}"`})
	if err != nil {
		t.Fatalf("pod %s: /tmp/pod-env: %v", pod, err)
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 3 {
		t.Fatalf("pod %s: /tmp/pod-env printed %q", pod, out)
	}
	return f[0], f[1], f[2]
}

// mpiPod is one pod of the job on node, with one device of pool ("" for none), the Secret's
// key pair mounted.
func mpiPod(e *env, ns, name, node, pool, image, secret string) *corev1.Pod {
	p := e.devicePod(ns, name, pool, 1)
	p.Spec.NodeSelector = map[string]string{hostnameLabel: node}
	p.Spec.Containers[0].Image = image
	p.Spec.Containers[0].Command = []string{"sh", "-c", mpiPodScript}
	mode := int32(0o400)
	p.Spec.Volumes = []corev1.Volume{{Name: "mpi-ssh", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: &mode}}}}
	p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "mpi-ssh", MountPath: "/etc/mpi-ssh", ReadOnly: true}}
	return p
}

// mpiSSHSecret is a Secret with a new ECDSA P-256 key pair: id_ecdsa (PEM, which OpenSSH's
// client reads) and authorized_keys (the public key in OpenSSH's format, which dropbear reads).
func mpiSSHSecret(ns string) (*corev1.Secret, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
	pub, err := key.PublicKey.ECDH()
	if err != nil {
		return nil, err
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "mpi-ssh", Namespace: ns},
		Data: map[string][]byte{
			"id_ecdsa":        priv,
			"authorized_keys": []byte(sshECDSAAuthorizedKey(pub.Bytes()) + " kube-rdma-e2e\n"),
		},
	}, nil
}

// sshECDSAAuthorizedKey is the authorized_keys form of a P-256 public key given as its
// uncompressed point (RFC 5656 section 3.1).
func sshECDSAAuthorizedKey(point []byte) string {
	var b []byte
	for _, s := range [][]byte{[]byte("ecdsa-sha2-nistp256"), []byte("nistp256"), point} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return "ecdsa-sha2-nistp256 " + base64.StdEncoding.EncodeToString(b)
}
