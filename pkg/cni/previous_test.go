package cni

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// leases returns host-local's leases of network "rdma" in the test's data
// dir: address -> "containerID/ifname".
func (e *env) leases(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(e.stateDir, "..", "ipam", "rdma")
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), "last_reserved_ip") || ent.Name() == "lock" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[ent.Name()] = strings.Join(strings.Fields(string(b)), "/")
	}
	return out
}

// lease makes host-local hand an address to containerID's ifName, as an
// ADD of a previous boot did.
func lease(t *testing.T, conf []byte, containerID, ifName string) {
	t.Helper()
	ia := IPAMArgs{ContainerID: containerID, Netns: "/var/run/netns/cni-of-a-previous-boot", IfName: ifName, Path: cniPath}
	if _, err := (execIPAM{}).Add(context.Background(), "host-local", conf, ia); err != nil {
		t.Fatalf("host-local ADD for %s/%s: %v", containerID, ifName, err)
	}
}

// previousBoot writes the record an ADD of a previous boot left for
// containerID (a standalone attachment: one device per pod interface).
func (e *env) previousBoot(t *testing.T, containerID string, conf []byte, podIfs ...string) attachment.Attachment {
	t.Helper()
	rec := attachment.Attachment{Key: attachment.Key{ContainerID: containerID, IfName: "eth0"},
		Netns: "/var/run/netns/cni-of-a-previous-boot", CNIVersion: "1.0.0", Network: "rdma", Complete: true}
	if strings.Contains(string(conf), `"ipam"`) {
		rec.IPAMConf = conf
	}
	for i, name := range podIfs {
		rec.Devices = append(rec.Devices, attachment.Device{RDMA: "mlx5_" + name, PodIfName: name, IPAM: true,
			Host: attachment.HostLink{Name: "gone" + name, Index: 40 + i, MTU: 1500, Up: true}})
	}
	if err := (attachment.Store{Dir: e.stateDir, BootID: "previous-boot"}).Save(rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func recordExists(t *testing.T, e *env, k attachment.Key) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(e.stateDir, k.ContainerID+"_"+k.IfName+".json"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestAddReleasesPreviousBoot: after a reboot, the first ADD releases the
// host-local leases that the records of the previous boot name (both pod
// interfaces of one) and removes those records, also one with no IPAM; the
// devices of the previous boot are not touched (they are on the host
// already). The new pod gets its address.
func TestAddReleasesPreviousBoot(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 1, false, "shared")
	ipam := e.conf("1.0.0", `"resourceName":"rdma/hca",`+e.ipam("10.70.0.0/24"))
	lease(t, ipam, "old", "net1")
	lease(t, ipam, "old", "net2")
	old := e.previousBoot(t, "old", ipam, "net1", "net2")
	bare := e.previousBoot(t, "bare", e.conf("1.0.0", `"resourceName":"rdma/hca"`), "net1")
	if diff := cmp.Diff(map[string]string{"10.70.0.2": "old/net1", "10.70.0.3": "old/net2"}, e.leases(t)); diff != "" {
		t.Fatalf("leases before (-want +got)\n%s", diff)
	}
	pod := netnstest.New(t)
	conf := e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.70.0.0/24"))
	mustAdd(t, e, args("c1", pod, "net1", conf))
	for ip, owner := range e.leases(t) {
		if strings.HasPrefix(owner, "old/") {
			t.Errorf("lease %s of the previous boot's %s still there after ADD", ip, owner)
		}
	}
	if got := e.leases(t); len(got) != 1 {
		t.Errorf("leases after ADD = %v, want only c1's", got)
	}
	for _, k := range []attachment.Key{old.Key, bare.Key} {
		if recordExists(t, e, k) {
			t.Errorf("record %s of the previous boot still there after ADD", k)
		}
	}
	if err := e.p.Del(context.Background(), args("c1", pod, "net1", conf)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if got := e.leases(t); len(got) != 0 {
		t.Errorf("leases after DEL = %v", got)
	}
}

// TestGCReleasesPreviousBoot: GC of any network releases the leases of
// the previous boot's records, each with the IPAM configuration it holds.
func TestGCReleasesPreviousBoot(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 0, false, "shared")
	ipam := e.conf("1.0.0", `"resourceName":"rdma/hca",`+e.ipam("10.71.0.0/24"))
	lease(t, ipam, "old", "net1")
	old := e.previousBoot(t, "old", ipam, "net1")
	gc := []byte(strings.Replace(string(e.conf("1.1.0", `"cni.dev/valid-attachments":[]`)), `"name":"rdma"`, `"name":"other"`, 1))
	if err := e.p.GC(context.Background(), args("", nil, "", gc)); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := e.leases(t); len(got) != 0 {
		t.Errorf("leases after GC = %v, want none", got)
	}
	if recordExists(t, e, old.Key) {
		t.Errorf("record of the previous boot still there after GC")
	}
}

// TestDelOfPreviousBoot: the runtime's DEL of a sandbox of the previous
// boot releases every lease its record names and removes the record.
func TestDelOfPreviousBoot(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 0, false, "shared")
	ipam := e.conf("1.0.0", `"resourceName":"rdma/hca",`+e.ipam("10.72.0.0/24"))
	lease(t, ipam, "old", "net1")
	lease(t, ipam, "old", "net2")
	lease(t, ipam, "other", "net1")
	old := e.previousBoot(t, "old", ipam, "net1", "net2")
	if err := e.p.Del(context.Background(), args("old", nil, "eth0", ipam)); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"10.72.0.4": "other/net1"}, e.leases(t)); diff != "" {
		t.Errorf("leases after DEL (-want +got)\n%s", diff)
	}
	if recordExists(t, e, old.Key) {
		t.Errorf("record of the previous boot still there after DEL")
	}
}

// TestPreviousBootReleaseFails: a release that fails (the IPAM plugin is
// not in CNI_PATH) keeps the record, of its own boot, counting the tries;
// it is removed only once both bounds are passed. A DEL of it fails while
// it is kept.
func TestPreviousBootReleaseFails(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	broken := e.conf("1.0.0", `"resourceName":"rdma/hca","ipam":{"type":"no-such-ipam"}`)
	old := e.previousBoot(t, "old", broken, "net1")
	store := attachment.Store{Dir: e.stateDir, BootID: e.p.BootID}
	gc := args("", nil, "", e.conf("1.1.0", `"cni.dev/valid-attachments":[]`))
	tries := func() *attachment.Release {
		t.Helper()
		rec, err := store.LoadPrevious(old.Key)
		if err != nil {
			t.Fatalf("record of the previous boot: %v", err)
		}
		if rec.BootID != "previous-boot" {
			t.Errorf("record's boot is now %q", rec.BootID)
		}
		return rec.Release
	}
	for want := 1; want <= previousTries+1; want++ {
		if err := e.p.GC(context.Background(), gc); err != nil {
			t.Fatalf("GC: %v", err)
		}
		if r := tries(); r == nil || r.Tries != want || !strings.Contains(r.Err, "no-such-ipam") {
			t.Fatalf("after GC %d: release %+v, want %d tries and the error", want, r, want)
		}
	}
	if err := e.p.Del(context.Background(), args("old", nil, "eth0", e.conf("1.0.0", `"resourceName":"rdma/hca"`))); err == nil {
		t.Error("DEL of a record whose release failed succeeded")
	}
	rec, _ := store.LoadPrevious(old.Key)
	rec.Release.Since = time.Now().Add(-previousAge - time.Minute)
	if err := store.SavePrevious(rec); err != nil {
		t.Fatal(err)
	}
	if err := e.p.GC(context.Background(), gc); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := store.LoadPrevious(old.Key); !errors.Is(err, attachment.ErrNotFound) {
		t.Errorf("record given up still there: %v", err)
	}
}

// TestDelWithoutRecordStandalone: a standalone DEL with no record (the
// record was lost) releases the leases of the pod interfaces its ADD's
// result (prevResult) names, or of the configured interfaceNames without
// one; not those of another container, nor of CNI_IFNAME.
func TestDelWithoutRecordStandalone(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 0, false, "shared")
	pod := netnstest.New(t)
	prev := `"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"veth1234"},{"name":"eth0","sandbox":"` + pod.Path + `"},` +
		`{"name":"net1","sandbox":"` + pod.Path + `"},{"name":"net2","sandbox":"` + pod.Path + `"}]}`
	tests := []struct {
		name, extra string
		ifs         []string
	}{
		{"prevResult", `"resourceName":"rdma/hca",` + prev, []string{"net1", "net2"}},
		{"interfaceNames", `"resourceName":"rdma/hca","interfaceNames":["rdma0","rdma1"]`, []string{"rdma0", "rdma1"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subnet := fmt.Sprintf("10.73.%d.0/24", i)
			conf := e.conf("1.0.0", tt.extra+","+e.ipam(subnet))
			for _, name := range append([]string{"eth0"}, tt.ifs...) {
				lease(t, conf, "c1", name)
			}
			lease(t, conf, "c2", tt.ifs[0])
			if err := e.p.Del(context.Background(), args("c1", pod, "eth0", conf)); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			var left []string
			for _, owner := range e.leases(t) {
				left = append(left, owner)
			}
			slices.Sort(left)
			want := []string{"c1/eth0", "c2/" + tt.ifs[0]}
			if diff := cmp.Diff(want, left); diff != "" {
				t.Errorf("leases after DEL (-want +got)\n%s", diff)
			}
			if err := os.RemoveAll(filepath.Join(e.stateDir, "..", "ipam", "rdma")); err != nil {
				t.Fatal(err)
			}
		})
	}
}
