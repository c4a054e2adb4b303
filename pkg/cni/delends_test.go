package cni

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// The tests of this file hold that a DEL whose pod netns is gone always
// ends: a NIC that comes back re-probed (any name, any MAC) is found by its
// function, an SF whose auxiliary device is gone is not waited for although
// its PF is there, a NIC that never comes back is given up after
// NetdevGiveUp across DELs, and no wait holds the node-wide lock. The
// fixtures' NICs are veths in a test netns with a sysfs tree from nodesim
// (this kernel has no RDMA): the sysfs net/ entries of a function are what
// the test says they are.

// editRecord rewrites the one attachment record of the env.
func editRecord(t *testing.T, e *env, key attachment.Key, edit func(*attachment.Attachment)) {
	t.Helper()
	st := attachment.Store{Dir: e.stateDir, BootID: e.p.BootID}
	rec, err := st.Load(key)
	if err != nil {
		t.Fatal(err)
	}
	edit(&rec)
	if err := st.Save(rec); err != nil {
		t.Fatal(err)
	}
}

func loadRecord(t *testing.T, e *env, key attachment.Key) attachment.Attachment {
	t.Helper()
	rec, err := attachment.Store{Dir: e.stateDir, BootID: e.p.BootID}.Load(key)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestDelFindsReprobedNIC: the pod's netns is gone and the NIC comes back
// re-probed, as a VF does after an FLR or mlx5 health recovery: another
// name (eth9) and another MAC, which nothing in the record knows. DEL finds
// it as the one netdev of its PCI function on the host and restores its
// name, MAC, MTU and up state. (Before, DEL looked for it by MAC only and
// failed with "not back" on every retry.)
func TestDelFindsReprobedNIC(t *testing.T) {
	e, before, a, ph, _ := goneAfterAddPod(t, "exclusive")
	key := attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}
	if got := loadRecord(t, e, key).Devices[0]; got.Kind != "PF" || got.PCIAddress != pciAddr(0) {
		t.Fatalf("record's device: kind %q, PCI %q; want PF %s", got.Kind, got.PCIAddress, pciAddr(0))
	}
	// The netns lives on in the pod's handle: the NIC leaves it as the
	// kernel returns a re-probed VF, under another name and MAC.
	const delay = 300 * time.Millisecond
	done := make(chan error, 1)
	time.AfterFunc(delay, func() {
		l, err := ph.LinkByName("net1")
		if err == nil {
			err = ph.LinkSetDown(l)
		}
		if err == nil {
			err = ph.LinkSetName(l, "eth9")
		}
		if err == nil {
			mac, _ := net.ParseMAC("02:00:00:00:bb:09")
			err = ph.LinkSetHardwareAddr(l, mac)
		}
		if err == nil {
			err = os.Rename(filepath.Join(e.sys, "bus/pci/devices", pciAddr(0), "net/nic0"),
				filepath.Join(e.sys, "bus/pci/devices", pciAddr(0), "net/eth9"))
		}
		if err == nil {
			err = ph.LinkSetNsFd(l, int(e.host.Handle))
		}
		done <- err
	})
	var logs bytes.Buffer
	e.p.Log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL: %v\n%s", err, logs.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("re-probing the NIC: %v", err)
	}
	after := e.snapshot()
	// The kernel-side RDMA view of the fake follows the test's moves only
	// through home(); the links and records are what DEL restored.
	if diff := cmp.Diff(before.Host, after.Host); diff != "" {
		t.Errorf("host links after DEL (-before +after):\n%s", diff)
	}
	if len(after.Records) != 0 {
		t.Errorf("records left: %v", after.Records)
	}
	if !strings.Contains(logs.String(), "netdev came back from the pod's netns") || !strings.Contains(logs.String(), "netdev=eth9") {
		t.Errorf("log does not say eth9 came back:\n%s", logs.String())
	}
}

// TestDelSFGone: an SF's record names its auxiliary device; its PCIAddress
// is its PF's, which stays on the node. With the auxiliary device gone (the
// SF deleted while its pod died) DEL does not wait and ends the attachment;
// with it there, DEL waits (and fails, code 11, until NetdevGiveUp).
func TestDelSFGone(t *testing.T) {
	for _, auxThere := range []bool{false, true} {
		name := map[bool]string{false: "aux-gone", true: "aux-there"}[auxThere]
		t.Run(name, func(t *testing.T) {
			e, _, a, _ := goneAfterAdd(t, "shared")
			e.p.NetdevReturnWait = 300 * time.Millisecond
			e.p.Node.StateDir = e.stateDir
			key := attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}
			editRecord(t, e, key, func(r *attachment.Attachment) {
				r.Devices[0].Kind, r.Devices[0].AuxDevice = "SF", "mlx5_core.sf.9"
			})
			if auxThere {
				if err := os.MkdirAll(filepath.Join(e.sys, "bus/auxiliary/devices/mlx5_core.sf.9/net"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			err := e.p.Del(context.Background(), a)
			took := time.Since(start)
			if !auxThere {
				if err != nil {
					t.Fatalf("DEL of an SF whose auxiliary device is gone: %v", err)
				}
				if took > e.p.NetdevReturnWait/2 {
					t.Errorf("DEL took %v: it waited for an SF that is gone (its PF is still there)", took)
				}
				if recs := e.snapshot().Records; len(recs) != 0 {
					t.Errorf("records left: %v", recs)
				}
				if codes := opCodes(t, e, "DEL"); len(codes) != 1 || codes[0] != OpCodeGaveUp {
					t.Errorf("operation records' codes = %v, want [%d]", codes, OpCodeGaveUp)
				}
				if g := giveUps(t, e); len(g) != 1 || g[0].Reason != cniops.GiveUpGone || g[0].Function != "mlx5_core.sf.9" ||
					g[0].Command != "DEL" || g[0].ContainerID != a.ContainerID || g[0].IfName != a.IfName {
					t.Errorf("give-ups in the spool: %+v, want the SF's, function-gone", g)
				}
				return
			}
			if !errors.Is(err, ErrNetdevNotBack) || cniCode(err) != 11 || !strings.Contains(err.Error(), "mlx5_core.sf.9") {
				t.Fatalf("DEL = %v (code %d), want ErrNetdevNotBack naming the SF's auxiliary device", err, cniCode(err))
			}
		})
	}
}

// TestDelGivesUp: a NIC whose function stays but whose netdev never comes
// back. Each DEL waits NetdevReturnWait and fails (code 11, the record
// kept, with the time the first wait began); once NetdevGiveUp has passed
// since then, DEL gives the NIC up (an error in the log), releases the
// attachment and removes the record: the runtime's retries end.
func TestDelGivesUp(t *testing.T) {
	e, _, a, _ := goneAfterAdd(t, "exclusive")
	e.p.NetdevReturnWait = 200 * time.Millisecond
	e.p.NetdevGiveUp = 700 * time.Millisecond
	e.p.Node.StateDir = e.stateDir
	var logs bytes.Buffer
	var mu sync.Mutex
	e.p.Log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	key := attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}
	start := time.Now()
	fails := 0
	var since *time.Time
	for {
		err := e.p.Del(context.Background(), a)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNetdevNotBack) || cniCode(err) != 11 {
			t.Fatalf("DEL %d = %v, want ErrNetdevNotBack (code 11) until the give-up", fails+1, err)
		}
		fails++
		rec := loadRecord(t, e, key)
		if s := rec.Devices[0].AwaitSince; s == nil || since != nil && !s.Equal(*since) {
			t.Fatalf("DEL %d: record's awaitSince %v, want the first wait's (%v) kept", fails, s, since)
		} else {
			since = s
		}
		if fails > 10 {
			t.Fatalf("DEL still failing after %d tries (%v)", fails, time.Since(start))
		}
	}
	took := time.Since(start)
	if fails < 2 {
		t.Errorf("DEL failed %d times before the give-up, want at least 2 (wait 200 ms, give-up 700 ms)", fails)
	}
	if took < e.p.NetdevGiveUp || took > e.p.NetdevGiveUp+e.p.NetdevReturnWait+time.Second {
		t.Errorf("the DELs ended after %v, want about the give-up (%v)", took, e.p.NetdevGiveUp)
	}
	if recs := e.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left after the give-up: %v", recs)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "given up, the attachment ends") {
		t.Errorf("the give-up is not an error in the log:\n%s", logs.String())
	}
	if codes := opCodes(t, e, "DEL"); len(codes) != 1 || codes[0] != OpCodeGaveUp {
		t.Errorf("operation records' codes = %v, want [%d]: the give-up counted in kube_rdma_cni_operations_total", codes, OpCodeGaveUp)
	}
	g := giveUps(t, e)
	if len(g) != 1 || g[0].Reason != cniops.GiveUpNotBack || g[0].Command != "DEL" || g[0].RDMA == "" ||
		g[0].Waited < e.p.NetdevGiveUp || g[0].ContainerID != a.ContainerID {
		t.Errorf("give-ups in the spool: %+v, want one, not-back, after at least %v", g, e.p.NetdevGiveUp)
	}
}

// giveUps is what the daemon reads from the node's give-up spool.
func giveUps(t *testing.T, e *env) []cniops.GiveUp {
	t.Helper()
	var out []cniops.GiveUp
	for range 2 {
		if _, err := cniops.DrainGiveUps(cniops.Dir(e.stateDir), func(g cniops.GiveUp) { out = append(out, g) }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// opCodes is the code of the operation record Main would leave for
// command, as the daemon reads it from the spool.
func opCodes(t *testing.T, e *env, command string) []uint {
	t.Helper()
	e.p.Node.StateDir = e.stateDir
	e.p.recordOp(command, nil, time.Millisecond)
	var codes []uint
	for range 2 { // Drain reads what its previous call moved aside
		if _, err := cniops.Drain(cniops.Dir(e.stateDir), func(r cniops.Record) { codes = append(codes, r.Code) }); err != nil {
			t.Fatal(err)
		}
	}
	return codes
}

// TestDelWaitHoldsNoLock: while a DEL waits for a NIC that does not come
// back, an ADD of another NIC and the DEL of another pod go through at
// once: the DEL does not hold the node-wide lock through its wait (an ADD
// would take NetdevReturnWait longer).
func TestDelWaitHoldsNoLock(t *testing.T) {
	e := newEnv(t, 3, false, "exclusive")
	e.p.NetdevReturnWait = 2 * time.Second
	e.p.NetdevGiveUp = time.Minute
	dying := netnstest.New(t)
	aDying := args("c-dying", dying, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`))
	mustAdd(t, e, aDying)
	other := netnstest.New(t)
	aOther := args("c-other", other, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`))
	mustAdd(t, e, aOther)
	// The dying pod's netns path goes; a handle keeps the netns (and the
	// NIC in it) alive, as a kernel that has not run its cleanup yet.
	keep := netnstest.Handle(t, dying)
	_ = keep
	if err := dying.Remove(); err != nil {
		t.Fatal(err)
	}
	delDone := make(chan error, 1)
	delStart := time.Now()
	go func() { delDone <- e.p.Del(context.Background(), aDying) }()
	time.Sleep(200 * time.Millisecond)

	third := netnstest.New(t)
	aThird := args("c-third", third, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_2"}`))
	t0 := time.Now()
	mustAdd(t, e, aThird)
	addTook := time.Since(t0)
	t0 = time.Now()
	if err := e.p.Del(context.Background(), aOther); err != nil {
		t.Fatalf("DEL of another pod: %v", err)
	}
	delOtherTook := time.Since(t0)
	select {
	case err := <-delDone:
		t.Fatalf("the waiting DEL ended (after %v: %v) before the ADD (%v) and DEL (%v) of the other pods: they waited behind it",
			time.Since(delStart), err, addTook, delOtherTook)
	default:
	}
	t.Logf("while a DEL waited: ADD of another NIC %v, DEL of another pod %v", addTook, delOtherTook)
	if addTook > time.Second || delOtherTook > time.Second {
		t.Errorf("ADD took %v and DEL %v while another DEL waited for its NIC (wait %v): they waited behind it",
			addTook, delOtherTook, e.p.NetdevReturnWait)
	}
	if err := <-delDone; !errors.Is(err, ErrNetdevNotBack) {
		t.Errorf("the waiting DEL = %v, want ErrNetdevNotBack", err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// deletedInPod ADDs mlx5_0 to a pod netns as net1 (shared mode, netconf
// fields conf, the pod ml/trainer-0 with UID u-1, the give-up spool on) and
// deletes net1 there, as a VF or SF removed while its pod runs.
func deletedInPod(t *testing.T, conf string) (*env, *skel.CmdArgs) {
	t.Helper()
	e := newEnv(t, 1, false, "shared")
	e.p.Node.StateDir = e.stateDir
	pod := netnstest.New(t)
	a := args("c1", pod, "net1", e.conf("1.1.0", conf))
	a.Args = "K8S_POD_NAMESPACE=ml;K8S_POD_NAME=trainer-0;K8S_POD_UID=u-1"
	mustAdd(t, e, a)
	ph := netnstest.Handle(t, pod)
	l, err := ph.LinkByName("net1")
	if err != nil {
		t.Fatal(err)
	}
	if err := ph.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	return e, a
}

// TestDelNICVanished: the NIC's netdev is deleted while the pod's netns is
// still there (a VF or SF removed with its pod running). DEL finds it in
// neither namespace: it does not wait, succeeds, removes the record, and
// leaves a give-up (vanished) for the daemon to report.
func TestDelNICVanished(t *testing.T) {
	e, a := deletedInPod(t, `"runtimeConfig":{"deviceID":"mlx5_0"}`)
	start := time.Now()
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL of a vanished NIC: %v", err)
	}
	if took := time.Since(start); took > e.p.NetdevReturnWait/2 {
		t.Errorf("DEL took %v: it waited for a NIC that is gone", took)
	}
	if recs := e.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
	if codes := opCodes(t, e, "DEL"); len(codes) != 1 || codes[0] != OpCodeGaveUp {
		t.Errorf("operation records' codes = %v, want [%d]", codes, OpCodeGaveUp)
	}
	g := giveUps(t, e)
	if len(g) != 1 || g[0].Reason != cniops.GiveUpVanished || g[0].Command != "DEL" || g[0].RDMA != "mlx5_0" ||
		g[0].PodNamespace != "ml" || g[0].PodName != "trainer-0" || g[0].PodUID != "u-1" || g[0].Netdev != "nic0" || g[0].PodIfName != "net1" {
		t.Errorf("give-ups in the spool: %+v, want mlx5_0's, vanished, naming pod ml/trainer-0", g)
	}
}

// TestReclaimSpoolsGiveUp: the daemon's reclaimer (NewReclaimer with the
// plugin's state dir) leaves a NIC it gives up in the same give-up spool as
// DEL and GC, as command "reclaim", so the daemon reports it the same way:
// here an SF whose auxiliary device went while its pod died.
func TestReclaimSpoolsGiveUp(t *testing.T) {
	e, _, a, _ := goneAfterAdd(t, "shared")
	r, err := NewReclaimer(nil, "test-boot", 300*time.Millisecond, e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.HostNS.Close()
	if r.Node.StateDir != e.stateDir {
		t.Fatalf("NewReclaimer: Node.StateDir %q, want the state dir it was given", r.Node.StateDir)
	}
	e.p.Node.StateDir = r.Node.StateDir
	key := attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}
	editRecord(t, e, key, func(r *attachment.Attachment) {
		r.Devices[0].Kind, r.Devices[0].AuxDevice = "SF", "mlx5_core.sf.9"
	})
	store := attachment.Store{Dir: e.stateDir, BootID: "test-boot"}
	res := e.p.Reclaim(context.Background(), ReclaimOpts{Store: store, SysfsRoot: e.sys}, []attachment.Key{key})
	if len(res) != 1 || res[0].Err != nil || res[0].Skipped != "" {
		t.Fatalf("Reclaim = %+v", res)
	}
	if recs := e.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
	if g := giveUps(t, e); len(g) != 1 || g[0].Command != "reclaim" || g[0].Reason != cniops.GiveUpGone ||
		g[0].Function != "mlx5_core.sf.9" || g[0].ContainerID != a.ContainerID {
		t.Errorf("give-ups in the spool: %+v, want the SF's, by reclaim, function-gone", g)
	}
}

// TestDelFindsReprobedNICNetnsOpen: the NIC is re-probed while its pod
// runs (an FLR or mlx5 health recovery: the VF's netdev leaves the pod's
// netns and comes back on the host as a new netdev, another name and MAC).
// DEL, the pod netns still there, finds it as its function's one netdev
// on the host, restores the record's name, MAC and MTU, and gives nothing
// up (before, it was reported vanished and left under its new name).
func TestDelFindsReprobedNICNetnsOpen(t *testing.T) {
	e, a := deletedInPod(t, `"mtu":9000,"runtimeConfig":{"deviceID":"mlx5_0"}`)
	rec := loadRecord(t, e, attachment.Key{ContainerID: a.ContainerID, IfName: a.IfName}).Devices[0]
	h := netnstest.Handle(t, e.host)
	mac, _ := net.ParseMAC("02:00:00:00:bb:09")
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth9", HardwareAddr: mac}, PeerName: "eth9p"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(e.sys, "bus/pci/devices", pciAddr(0), "net/nic0"),
		filepath.Join(e.sys, "bus/pci/devices", pciAddr(0), "net/eth9")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.p.Del(context.Background(), a); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if took := time.Since(start); took > e.p.NetdevReturnWait/2 {
		t.Errorf("DEL took %v: it waited although the NIC was on the host", took)
	}
	back, err := h.LinkByName("nic0")
	if err != nil {
		t.Fatalf("the re-probed netdev is not back as nic0: %v", err)
	}
	if back.Attrs().HardwareAddr.String() != rec.Host.MAC || back.Attrs().MTU != rec.Host.MTU {
		t.Errorf("nic0 after DEL: MAC %s MTU %d, want the record's %s %d", back.Attrs().HardwareAddr, back.Attrs().MTU, rec.Host.MAC, rec.Host.MTU)
	}
	if recs := e.snapshot().Records; len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
	if g := giveUps(t, e); len(g) != 0 {
		t.Errorf("give-ups: %+v, want none: the NIC came back", g)
	}
	if codes := opCodes(t, e, "DEL"); len(codes) != 1 || codes[0] != 0 {
		t.Errorf("operation records' codes = %v, want [0]", codes)
	}
}
