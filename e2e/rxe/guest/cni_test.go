//go:build rxe_guest

package guest

// Tests of the project's binaries in the guest. Each skips with the reason until the harness
// finds and builds the binary (./cmd/cni, ./cmd/device-plugin).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
)

// cniExec runs the CNI binary with the CNI_* environment of the spec and netconf on stdin,
// and returns its stdout (the result) and stderr separately: a CNI plugin writes nothing
// but its result to stdout.
func cniExec(t *testing.T, bin, command, containerID, netns, ifname string, netconf []byte) (stdout, stderr string, err error) {
	t.Helper()
	return cniExecArgs(t, bin, command, containerID, netns, ifname, "", netconf)
}

// cniExecArgs is cniExec with CNI_ARGS ("K=V;K=V"), where a runtime names the pod
// (K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID).
func cniExecArgs(t *testing.T, bin, command, containerID, netns, ifname, cniArgs string, netconf []byte) (stdout, stderr string, err error) {
	t.Helper()
	return cniRun(t, bin, command, containerID, netns, ifname, cniArgs, guestNodeFile(t), netconf)
}

// cniExecNode is cniExec with the node file at nodeFile.
func cniExecNode(t *testing.T, bin, command, containerID, netns, ifname, nodeFile string, netconf []byte) (stdout, stderr string, err error) {
	t.Helper()
	return cniRun(t, bin, command, containerID, netns, ifname, "", nodeFile, netconf)
}

func cniRun(t *testing.T, bin, command, containerID, netns, ifname, cniArgs, nodeFile string, netconf []byte) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(),
		"CNI_COMMAND="+command,
		"CNI_CONTAINERID="+containerID,
		"CNI_NETNS="+netns,
		"CNI_IFNAME="+ifname,
		"CNI_PATH="+os.Getenv("KUBE_RDMA_CNI_PLUGINS_DIR"),
		"CNI_ARGS="+cniArgs,
		"KUBE_RDMA_CNI_NODE_FILE="+nodeFile,
	)
	cmd.Stdin = bytes.NewReader(netconf)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		return o.String(), e.String(), fmt.Errorf("cni %s %s: %w: stdout %s stderr %s", command, containerID, err, o.String(), e.String())
	}
	return o.String(), e.String(), nil
}

// guestNodeFile writes the plugin's node file for the guest: the default host paths but an
// allocDir of the test's own (a pools file the guest's device plugin test left at the default
// one names only the devices of that moment), and requirePodResources off, as the guest runs
// no kubelet to confirm a deviceID (and no daemon writes a pools file for these devices).
func guestNodeFile(t *testing.T) string {
	t.Helper()
	off := false
	b, err := netconf.Node{RequirePodResources: &off, AllocDir: t.TempDir()}.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), netconf.NodeFileName)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// cniNetconf is the network configuration the runtime passes to the plugin for one pod:
// the RDMA device chosen by the device plugin in runtimeConfig.deviceID, and an address from
// the static IPAM plugin.
func cniNetconf(t *testing.T, deviceID, cidr string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"cniVersion":    "1.0.0",
		"name":          "rxe-e2e",
		"type":          "kube-rdma",
		"runtimeConfig": map[string]any{"deviceID": deviceID},
		"ipam":          map[string]any{"type": "static", "addresses": []map[string]string{{"address": cidr}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cniPod is one pod of the CNI test: its netns, container id, the device it asks for, and
// what ADD gave it.
type cniPod struct {
	ns, id, deviceID, cidr string
	ep                     endpoint // filled after ADD
}

// TestCNIAddDelRestoresHost runs the CNI binary as a runtime would for two pods on a node
// with two soft-RoCE devices, rxe0 and rxe1, on the two ends of a veth pair, and checks:
//   - ADD prints a CNI result with the pod's address on CNI_IFNAME;
//   - afterwards the pod's netns holds CNI_IFNAME and an RDMA device bound to it, whose RoCE
//     v2 GID for that address carries RC traffic (ibv_rc_pingpong) to the other pod;
//   - DEL succeeds, and succeeds again (DEL is idempotent);
//   - the root netns after DEL looks as it did before ADD (links, addresses, routes, RDMA
//     devices and links, netns list).
func TestCNIAddDelRestoresHost(t *testing.T) {
	requireGuest(t)
	cniAddDelRestoresHost(t, false)
}

// TestCNIAddDelRestoresHostExclusive is TestCNIAddDelRestoresHost in the exclusive RDMA
// netns mode (set for the test, while no other netns exists, and set back after it), where
// the pod sees only the RDMA devices in its own netns. Besides, it checks that the root netns
// keeps no RDMA device while the pods hold theirs (no rxe left bound to a netdev it cannot
// see), and that the pod's device has the kernel's GSI QP, without which rdma_cm cannot
// connect (rping between the pods then runs).
func TestCNIAddDelRestoresHostExclusive(t *testing.T) {
	requireGuest(t)
	setNetnsMode(t, "exclusive")
	t.Cleanup(func() { setNetnsMode(t, "shared") })
	cniAddDelRestoresHost(t, true)
}

// setNetnsMode sets the RDMA netns mode, which the kernel refuses (EBUSY) while a netns
// other than the initial one exists: one deleted a moment ago may still be on its way out.
func setNetnsMode(t *testing.T, mode string) {
	t.Helper()
	waitFor(t, 60*time.Second, "rdma system set netns "+mode, func() (bool, error) {
		_, err := run(t, "", "rdma", "system", "set", "netns", mode)
		return err == nil, nil
	})
}

func cniAddDelRestoresHost(t *testing.T, exclusive bool) {
	bin := requireBinary(t, "KUBE_RDMA_CNI_BIN", "./cmd/cni")
	const ifname = "net1"

	mustRun(t, "", "ip", "link", "add", "name", "cnih0", "type", "veth", "peer", "name", "cnih1")
	cleanupRun(t, "", "ip", "link", "del", "cnih0")
	for _, dev := range []string{"cnih0", "cnih1"} {
		mustRun(t, "", "ip", "link", "set", dev, "up")
	}
	for i, dev := range []string{"cnih0", "cnih1"} {
		addRXE(t, "", fmt.Sprintf("rxe%d", i), dev)
	}
	pods := []*cniPod{
		{ns: "cnipodA", id: "e2e-pod-a", deviceID: "rxe0", cidr: "192.0.2.21/24"},
		{ns: "cnipodB", id: "e2e-pod-b", deviceID: "rxe1", cidr: "192.0.2.22/24"},
	}
	for _, p := range pods {
		addNetns(t, p.ns)
	}

	before := hostState(t)
	for _, p := range pods {
		out, _, err := cniExec(t, bin, "ADD", p.id, "/run/netns/"+p.ns, ifname, cniNetconf(t, p.deviceID, p.cidr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { // the pod goes away even if the test fails half way
			if _, _, err := cniExec(t, bin, "DEL", p.id, "/run/netns/"+p.ns, ifname, cniNetconf(t, p.deviceID, p.cidr)); err != nil {
				t.Logf("cleanup: %v", err)
			}
		})
		var res struct {
			CNIVersion string `json:"cniVersion"`
			IPs        []struct {
				Address string `json:"address"`
			} `json:"ips"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.CNIVersion == "" {
			t.Fatalf("ADD %s: stdout is not a CNI result (%v):\n%s", p.id, err, out)
		}
		if len(res.IPs) != 1 || res.IPs[0].Address != p.cidr {
			t.Fatalf("ADD %s: result ips = %+v, want [%s]:\n%s", p.id, res.IPs, p.cidr, out)
		}
		links := mustRun(t, p.ns, "rdma", "link", "show")
		dev, ok := rdmaLinkOnNetdev(links, ifname)
		if !ok {
			t.Fatalf("ADD %s: no RDMA device on %s in netns %s:\n%s", p.id, ifname, p.ns, links)
		}
		ip, _, _ := net.ParseCIDR(p.cidr)
		p.ep = endpoint{NS: p.ns, Netdev: ifname, RXE: dev, IP: ip}
		if exclusive {
			// The root netns's sysfs shows no device of another netns: ask in the pod's.
			p.ep.GID = roceV2GIDIn(t, p.ns, dev, ip)
		} else {
			p.ep.GID = roceV2GID(t, dev, ip)
		}
		t.Logf("ADD %s: %s on %s in %s, RoCE v2 GID index %d", p.id, dev, ifname, p.ns, p.ep.GID)
	}
	if exclusive {
		// Both pods hold their devices: the root netns has none left (an rxe registered in
		// it, bound to a netdev in a pod, shows there without its netdev).
		if links := strings.TrimSpace(mustRun(t, "", "rdma", "link", "show")); links != "" {
			t.Errorf("root netns still has RDMA devices while the pods hold theirs:\n%s", links)
		}
	}

	a, b := pods[0].ep, pods[1].ep
	const port = 18900
	common := []string{"-p", strconv.Itoa(port), "-n", "100", "-c"}
	srv := proc{NS: a.NS, Name: "ibv_rc_pingpong", Args: append([]string{"-d", a.RXE, "-g", strconv.Itoa(a.GID)}, common...)}
	cli := proc{NS: b.NS, Name: "ibv_rc_pingpong", Args: append(append([]string{"-d", b.RXE, "-g", strconv.Itoa(b.GID)}, common...), a.IP.String())}
	_, out := runServerClient(t, srv, cli, tcpListening(port), 3)
	if !strings.Contains(out, "iters in") {
		t.Fatalf("pod-to-pod ibv_rc_pingpong reported no iterations:\n%s", out)
	}
	t.Logf("pod-to-pod ibv_rc_pingpong %s -> %s: %s", b.RXE, a.RXE, lastLine(out))
	if exclusive {
		t.Run("rdma_cm", func(t *testing.T) { rpingPods(t, a, b) })
	}

	for _, p := range pods {
		for i := 1; i <= 2; i++ { // DEL must be idempotent
			if _, _, err := cniExec(t, bin, "DEL", p.id, "/run/netns/"+p.ns, ifname, cniNetconf(t, p.deviceID, p.cidr)); err != nil {
				t.Fatalf("DEL #%d: %v", i, err)
			}
		}
	}
	if after := hostState(t); after != before {
		t.Errorf("root netns after DEL differs from before ADD\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// roceV2GIDIn waits for dev's port 1, seen from netns ns (`ibv_devinfo -v` there: `ip netns
// exec` mounts the netns's own sysfs), to list a RoCE v2 GID for ip and returns its index.
func roceV2GIDIn(t *testing.T, ns, dev string, ip net.IP) int {
	t.Helper()
	idx := -1
	waitFor(t, 30*time.Second, fmt.Sprintf("RoCE v2 GID %s on %s in netns %s", ip, dev, ns), func() (bool, error) {
		out, err := run(t, ns, "ibv_devinfo", "-v", "-d", dev)
		if err != nil {
			return false, nil
		}
		idx = devinfoRoceV2GID(out, ip)
		return idx >= 0, nil
	})
	return idx
}

// rpingPods runs rping (connection through rdma_cm, whose CM messages go through the
// device's GSI QP) from b to a. A kernel whose rxe re-creates no GSI QP after the device
// changed netns (7.3: "Couldn't create ib_mad QP1") cannot: the test skips, saying so.
func rpingPods(t *testing.T, a, b endpoint) {
	for _, e := range []endpoint{a, b} {
		qps, err := run(t, e.NS, "rdma", "resource", "show", "qp", "link", e.RXE+"/1")
		if err != nil || !hasGSIQP(qps) {
			t.Skipf("%s in netns %s has no GSI QP (qpn 1) after its move into the pod's netns, so rdma_cm cannot connect "+
				"(this kernel's rxe refuses a second GSI QP per port: dmesg \"Couldn't create ib_mad QP1\"):\n%s%v", e.RXE, e.NS, qps, err)
		}
	}
	const port = 18910
	srv := proc{NS: a.NS, Name: "rping", Args: []string{"-s", "-a", a.IP.String(), "-p", strconv.Itoa(port), "-C", "10", "-v"}}
	cli := proc{NS: b.NS, Name: "rping", Args: []string{"-c", "-a", a.IP.String(), "-p", strconv.Itoa(port), "-C", "10", "-v"}}
	_, out := runServerClient(t, srv, cli, cmListeningIn(t, a.NS, port), 3)
	if n := strings.Count(out, "ping data:"); n != 10 {
		t.Fatalf("rping %s -> %s: %d pings, want 10:\n%s", b.NS, a.NS, n, out)
	}
}
