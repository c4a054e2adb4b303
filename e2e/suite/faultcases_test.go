package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// The faults phase's tests: each breaks one thing under running and starting pods
// and ends with fault.check, the one invariant (faults_test.go).

const quarantinedAttachments = `kube_rdma_device_plugin_quarantined_files{kind="attachment"}`

// testFaultTornRecord: the attachment record of a running chained pod (torn-vf) is cut in
// half on disk. The next reader (a new pod's ADD, or the daemon's reclaimer) moves it to
// <stateDir>/quarantine/ with its bytes and goes on: the new pod gets its netdev, the torn
// pod keeps running with its own, the daemon's gauge counts the file. What the torn pod
// loses is its DEL's restore (no record: IPAM is released, the netdev is not given back by
// kube-rdma; a NIC comes back to the host when its netns dies, the fixture's veth does
// not), so before deleting it the test writes its record back and deletes the quarantined
// copy, as an operator would once looked at.
func testFaultTornRecord(t *testing.T, e *env) {
	c := e.needFaults(t)
	f := e.beginFault(t, "torn attachment record", e.chainedPool)
	torn := e.startWatchedPodNamed(t, f.ns, "torn-"+dnsName(e.chainedPool), *e.pool(e.chainedPool))
	file, _, err := c.recordOf(t.Context(), f.ns, torn.name)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.cniState, file)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := orig[:len(orig)/2]
	if err := os.WriteFile(path, cut, 0o600); err != nil {
		t.Fatal(err)
	}
	tornAt := time.Now()
	if err := f.create(t.Context(), "after-torn-"+dnsName(e.chainedPool), e.chainedPool); err != nil {
		t.Fatal(err)
	}
	moved, err := waitQuarantined(t.Context(), filepath.Join(c.cniState, "quarantine", file+".*"), cut)
	if err != nil {
		t.Fatal(err)
	}
	movedIn := time.Since(tornAt)
	gauge, err := e.waitGauge(t.Context(), quarantinedAttachments)
	if err != nil {
		t.Error(err)
	}
	torn.checkIntact(t)
	// The torn pod's own cost, then the operator's part (see above).
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	removeQuarantined(t, moved)
	f.healed = tornAt
	f.watched = append(f.watched, torn)
	out := f.check(t)
	f.report(t, fmt.Sprintf("a running pod's record cut in half: moved to quarantine/ %.1f s after (by the next ADD or the reclaimer), %s = %v, its pod kept its netdev",
		movedIn.Seconds(), quarantinedAttachments, gauge), out)
}

// testFaultPreviousBoot: a reboot as the CNI plugin sees one, a record of another boot on
// disk. The harness cannot give the node a new boot ID (/proc/sys/kernel/random/boot_id is
// the host's), so the test plants what a reboot leaves: a copy of a running pod's record
// under another container ID with another bootID and a netns of that boot, and a host-local
// lease of that container ID (the lease host-local keeps on disk across a reboot). The next
// ADD or reclaimer pass must release the lease through IPAM DEL and remove the record,
// without touching the running pod, whose devices the planted record names too.
func testFaultPreviousBoot(t *testing.T, e *env) {
	c := e.needFaults(t)
	f := e.beginFault(t, "simulated reboot", e.chainedPool)
	w := f.watched[0]
	_, rec, err := c.recordOf(t.Context(), f.ns, w.name)
	if err != nil {
		t.Fatal(err)
	}
	lease, content, err := c.leaseOf(rec.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	prevID := fmt.Sprintf("%064x", time.Now().UnixNano())
	prev := rec
	prev.ContainerID = prevID
	prev.BootID = "00000000-e2e0-4000-8000-000000000001"
	prev.Netns = filepath.Join(filepath.Dir(rec.Netns), "cni-previous-boot")
	prev.Pod = &attachment.PodRef{Namespace: f.ns, Name: "before-reboot"}
	b, err := json.Marshal(prev)
	if err != nil {
		t.Fatal(err)
	}
	recPath := filepath.Join(c.cniState, prevID+"_"+rec.IfName+".json")
	prevLease, err := freeLease(lease)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prevLease, bytes.ReplaceAll(content, []byte(rec.ContainerID), []byte(prevID)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	planted := time.Now()
	if err := f.create(t.Context(), "after-reboot-"+dnsName(e.chainedPool), e.chainedPool); err != nil {
		t.Fatal(err)
	}
	err = eventually(t.Context(), 90*time.Second, func(context.Context) error {
		var left []string
		for _, p := range []string{recPath, prevLease} {
			if _, err := os.Stat(p); err == nil {
				left = append(left, p)
			}
		}
		if left != nil {
			return fmt.Errorf("the previous boot's record and lease not released: %v left", left)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	released := time.Since(planted)
	f.healed = planted
	out := f.check(t)
	f.report(t, fmt.Sprintf("a record of another boot (and its host-local lease %s) planted beside a running pod's: lease released and record removed %.1f s after",
		filepath.Base(prevLease), released.Seconds()), out)
}

// leaseOf finds host-local's lease of containerID under the chained entry's dataDir:
// <dataDir>/<network>/<ip>, whose first line is the container ID.
func (c *faultsConfig) leaseOf(containerID string) (string, []byte, error) {
	files, err := filepath.Glob(filepath.Join(c.rdmaIPAM, "*", "*"))
	if err != nil {
		return "", nil, err
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err == nil && bytes.HasPrefix(b, []byte(containerID)) {
			return p, b, nil
		}
	}
	return "", nil, fmt.Errorf("no host-local lease of %s under %s", containerID, c.rdmaIPAM)
}

// freeLease returns the path of a lease file beside lease (<network>/<ip>) for an address of
// its /24 that nothing holds, from the top.
func freeLease(lease string) (string, error) {
	ip, err := netip.ParseAddr(filepath.Base(lease))
	if err != nil || !ip.Is4() {
		return "", fmt.Errorf("lease %s: not an IPv4 address", lease)
	}
	a := ip.As4()
	for last := 250; last > 1; last-- {
		a[3] = byte(last)
		p := filepath.Join(filepath.Dir(lease), netip.AddrFrom4(a).String())
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no free address beside %s", lease)
}

// testFaultConflist031: the node's primary conflist rewritten as cniVersion 0.3.1 without
// kube-rdma's entry (a network plugin's own install of an older spec). cni-chain chains the
// entry into it again; chained pods created then get their netdev, and are deleted under it
// (DEL of spec 0.3.1). The conflist is restored afterwards.
func testFaultConflist031(t *testing.T, e *env) {
	c := e.needFaults(t)
	orig, err := os.ReadFile(c.conflist)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() error { return writeConflist(c.conflist, orig) }
	t.Cleanup(func() {
		if err := restore(); err != nil {
			t.Errorf("restore %s: %v", c.conflist, err)
		}
	})
	list := withoutKubeRDMA(t, c.conflist, orig)
	list["cniVersion"] = "0.3.1"
	old, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	f := e.beginFault(t, "0.3.1 primary conflist", e.chainedPool)
	if err := writeConflist(c.conflist, old); err != nil {
		t.Fatal(err)
	}
	rewritten := time.Now()
	err = eventually(t.Context(), time.Minute, func(context.Context) error {
		b, err := os.ReadFile(c.conflist)
		if err != nil {
			return err
		}
		var now struct {
			CNIVersion string `json:"cniVersion"`
			Plugins    []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(b, &now); err != nil {
			return err
		}
		if now.CNIVersion != "0.3.1" || len(now.Plugins) == 0 || now.Plugins[len(now.Plugins)-1].Type != "kube-rdma" {
			return fmt.Errorf("%s: cniVersion %s, plugins %+v: want 0.3.1 ending with kube-rdma", c.conflist, now.CNIVersion, now.Plugins)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	chained := time.Since(rewritten)
	f.healed = time.Now()
	for i := range 2 {
		if err := f.create(t.Context(), fmt.Sprintf("v031-%d", i), e.chainedPool); err != nil {
			t.Fatal(err)
		}
	}
	out := f.check(t)
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	f.report(t, fmt.Sprintf("the primary conflist rewritten as cniVersion 0.3.1 without kube-rdma: chained again by cni-chain %.1f s after, pods added and deleted under it",
		chained.Seconds()), out)
}

// withoutKubeRDMA is the conflist orig (read from path) without its kube-rdma entry, which
// it must have.
func withoutKubeRDMA(t *testing.T, path string, orig []byte) map[string]any {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(orig, &list); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	plugins, _ := list["plugins"].([]any)
	var kept []any
	for _, p := range plugins {
		if m, _ := p.(map[string]any); m["type"] != "kube-rdma" {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(plugins) {
		t.Fatalf("%s has no kube-rdma entry to start from", path)
	}
	list["plugins"] = kept
	return list
}

// writeAtomic replaces path by b (mode) through a temporary file beside its directory (the
// CNI config and bin dirs must not see a partial file, nor a temporary one).
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(filepath.Dir(path)), ".e2e-conflist-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), mode); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// testFaultDaemonKilled: chained pods created one every 200 ms; after the third, the node
// agent's process is killed (SIGKILL, what an OOM kill or a node-level kill does). The CNI
// plugin and its conflist entry stay on the node all through (sampled), so ADDs go on while
// the daemon is away; the kubelet restarts its container and the pools come back. Pods
// admitted while the pools were gone fail at admission, loudly.
func testFaultDaemonKilled(t *testing.T, e *env) {
	e.needFaults(t)
	f := e.beginFault(t, "daemon killed during ADDs", e.chainedPool)
	r0, err := e.daemonRestarts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := e.mustHook(t, 30*time.Second, "node-state")
	stop := e.sampleCNIFiles(t.Context(), before)
	var killed time.Time
	for i := range 8 {
		if i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		if err := f.create(t.Context(), fmt.Sprintf("kill-%02d", i), e.chainedPool); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			if _, err := killDaemon(); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}
	err = e.waitDaemonBack(t.Context(), r0, nil)
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	back := time.Since(killed)
	samples, diff := stop()
	if diff != "" {
		t.Errorf("the CNI binary or conflist changed while the daemon was killed (-before +during):\n%s", diff)
	}
	f.healed = killed
	out := f.check(t)
	f.report(t, fmt.Sprintf("kill -9 of the daemon's process after the 3rd of 8 chained pods (one every 200 ms): pools allocatable again %.1f s after the kill, CNI files unchanged in %d samples",
		back.Seconds(), samples), out)
}

// testFaultKubeletRestart: chained pods created while the kubelet restarts (hook
// restart-kubelet after the second of four).
func testFaultKubeletRestart(t *testing.T, e *env) {
	e.needFaults(t)
	f := e.beginFault(t, "kubelet restarted during pod starts", e.chainedPool)
	var restart time.Duration
	for i := range 4 {
		if err := f.create(t.Context(), fmt.Sprintf("kubelet-%02d", i), e.chainedPool); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			t0 := time.Now()
			e.mustHook(t, 3*time.Minute, "restart-kubelet")
			restart = time.Since(t0)
			f.healed = time.Now()
		}
	}
	out := f.check(t)
	f.report(t, fmt.Sprintf("the kubelet restarted (%.1f s to healthy) after the 2nd of 4 chained pods was created", restart.Seconds()), out)
}

// apiDown is how long testFaultAPIServerDown keeps the API server stopped.
const apiDown = 60 * time.Second

// testFaultAPIServerDown: the API server stopped for 60 s with a watched pod of every pool.
// Meanwhile the daemon keeps serving the kubelet: its device plugin sockets and the CNI
// files stay (node-state sampled) and its /metrics answers (every 5 s); no container of the
// daemon restarts. After the API
// server is back the kubelet renews its node Lease, every device is allocatable, a new chained pod
// gets its netdev and the watched pods are intact.
func testFaultAPIServerDown(t *testing.T, e *env) {
	e.needFaults(t)
	f := e.beginFault(t, "API server down 60 s")
	r0, err := e.daemonRestarts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	before := e.mustHook(t, 30*time.Second, "node-state")
	e.mustHook(t, 2*time.Minute, "apiserver", "stop")
	stopped := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			e.mustHook(t, 2*time.Minute, "apiserver", "start")
		}
	})
	stop := e.sampleNodeState(t.Context(), before, func(line string) string {
		if strings.HasPrefix(line, "socket ") || strings.HasPrefix(line, "cni-") {
			return line
		}
		return ""
	})
	var answered, asked int
	for time.Since(stopped) < apiDown {
		time.Sleep(5 * time.Second)
		asked++
		if _, found, err := e.metric(t.Context(), quarantinedAttachments); err == nil && found {
			answered++
		}
	}
	samples, diff := stop()
	e.mustHook(t, 2*time.Minute, "apiserver", "start")
	up = true
	f.healed = time.Now()
	if diff != "" {
		t.Errorf("with the API server down, the daemon's sockets or the CNI files changed (-before +during):\n%s", diff)
	}
	if answered != asked {
		t.Errorf("with the API server down, the daemon's /metrics answered %d of %d scrapes", answered, asked)
	}
	// The kubelet renews its node Lease every 10 s (its node status only on a change or
	// every 5 min): a renewal after the API server is back is the kubelet reporting again.
	leases, err := coordinationv1client.NewForConfig(e.rest)
	if err != nil {
		t.Fatal(err)
	}
	err = eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		l, err := leases.Leases("kube-node-lease").Get(ctx, e.node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(f.healed) {
			return fmt.Errorf("node %s: Lease not renewed since the API server came back (%v)", e.node, l.Spec.RenewTime)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reported := time.Since(f.healed)
	name := "after-api-" + dnsName(e.chainedPool)
	created := time.Now()
	if err := f.create(t.Context(), name, e.chainedPool); err != nil {
		t.Fatal(err)
	}
	// Its start, apart: the scheduler's and the kubelet's watches come back on their own
	// schedule after an outage, which is Kubernetes', not the daemon's.
	err = eventually(t.Context(), podStartup, func(ctx context.Context) error {
		p, err := e.core.Pods(f.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !podReady(p) {
			return fmt.Errorf("pod %s: phase %s, not ready", name, p.Status.Phase)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	startedIn := time.Since(created)
	out := f.check(t)
	r, err := e.daemonRestarts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r != r0 {
		t.Errorf("the daemon's containers restarted %d times during the API server's outage", r-r0)
	}
	f.report(t, fmt.Sprintf("kube-apiserver stopped %s: device plugin sockets and CNI files unchanged in %d samples, /metrics answered %d of %d, 0 daemon restarts; node Lease renewed %.1f s after it was back, a chained pod created then Ready %.1f s after its creation",
		apiDown, samples, answered, asked, reported.Seconds(), startedIn.Seconds()), out)
}

// parkDir is where the e2e build's fault hook looks for its park file (cni.DefaultParkDir;
// the suite does not link pkg/cni's e2e build).
const parkDir = "/run/kube-rdma-e2e-faulthook"

// e2ePlugin is the node's installed CNI plugin and the one built with kuberdma_e2e (hook
// describe's cni-e2e-binary), which a fault puts in its place for a while.
type e2ePlugin struct {
	path           string // the installed plugin
	orig, e2eBuild []byte
}

// loadE2EPlugin reads both plugins; it skips t when the harness has no e2e build.
func loadE2EPlugin(t *testing.T, c *faultsConfig) *e2ePlugin {
	t.Helper()
	if c.cniE2EBinary == "" {
		t.Skip("hook describe names no cni-e2e-binary (e2e/local-node/images.sh keeps the plugin built with kuberdma_e2e)")
	}
	p := &e2ePlugin{path: c.cniBin}
	var err error
	if p.orig, err = os.ReadFile(c.cniBin); err != nil {
		t.Fatal(err)
	}
	if p.e2eBuild, err = os.ReadFile(c.cniE2EBinary); err != nil {
		t.Fatal(err)
	}
	return p
}

// install puts the e2e build in place of the installed plugin, in place: cni-chain puts its
// binary back on its removal or a rename (and when a conflist changes), not on a write.
func (p *e2ePlugin) install() error { return os.WriteFile(p.path, p.e2eBuild, 0o755) }

// restore puts the installed plugin back, atomically.
func (p *e2ePlugin) restore() error { return writeAtomic(p.path, p.orig, 0o755) }

// installed reports whether the e2e build is still in place.
func (p *e2ePlugin) installed() (bool, error) {
	now, err := os.ReadFile(p.path)
	return bytes.Equal(now, p.e2eBuild), err
}

// testFaultCNIKilled: the CNI plugin killed mid-ADD. The plugin built with kuberdma_e2e
// (hook describe's cni-e2e-binary) replaces the installed one for this test; its fault hook
// parks the ADD of the pod parked-<pool> at the step "move": the netdev is in the pod, the
// attachment record does not say the ADD finished. The process is killed there (SIGKILL)
// and the installed plugin put back at once, so that what follows is the shipped plugin's
// work: the runtime tears the sandbox down (DEL undoes the half-done ADD from its record),
// the kubelet creates another, and the pod runs with its netdev.
func testFaultCNIKilled(t *testing.T, e *env) {
	c := e.needFaults(t)
	plugin := loadE2EPlugin(t, c)
	f := e.beginFault(t, "CNI plugin killed mid-ADD", e.chainedPool)
	if err := plugin.install(); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			if err := plugin.restore(); err != nil {
				t.Errorf("put the installed CNI plugin back: %v", err)
			}
			restored = true
		}
	}
	t.Cleanup(restore)
	if err := os.MkdirAll(parkDir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(parkDir) })
	if err := os.WriteFile(filepath.Join(parkDir, "park"), []byte("move\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	name := "parked-" + dnsName(e.chainedPool)
	created := time.Now()
	if err := f.create(t.Context(), name, e.chainedPool); err != nil {
		t.Fatal(err)
	}
	var parked string
	err := eventually(t.Context(), time.Minute, func(context.Context) error {
		m, err := filepath.Glob(filepath.Join(parkDir, "parked.*"))
		if err != nil || len(m) != 1 {
			return fmt.Errorf("no ADD parked at move: %v %v", m, err)
		}
		parked = m[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	parkedIn := time.Since(created)
	// The ADD's record is there and not complete: it was stopped between two of its steps.
	recs, err := c.records()
	if err != nil {
		t.Fatal(err)
	}
	half := 0
	for _, a := range recs {
		if a.Pod != nil && a.Pod.Namespace == f.ns && a.Pod.Name == name && !a.Complete {
			half++
		}
	}
	if half != 1 {
		t.Errorf("%d incomplete attachment records of pod %s while its ADD is parked, want 1", half, name)
	}
	pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Ext(parked), "."))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 the parked CNI plugin %d: %v", pid, err)
	}
	f.healed = time.Now()
	restore()
	out := f.check(t)
	f.report(t, fmt.Sprintf("the ADD of a chained pod parked at \"move\" (netdev in the pod, record incomplete) %.1f s after its creation and killed (SIGKILL); the installed plugin put back",
		parkedIn.Seconds()), out)
}
