package cni

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// stallingIPAM runs the real IPAM plugin, but its ADD for one container
// waits until release is closed, as a hung IPAM plugin would.
type stallingIPAM struct {
	IPAM
	container string
	entered   chan struct{}
	release   chan struct{}
}

func (s stallingIPAM) Add(ctx context.Context, plugin string, stdin []byte, a IPAMArgs) (types.Result, error) {
	if a.ContainerID == s.container {
		close(s.entered)
		<-s.release
	}
	return s.IPAM.Add(ctx, plugin, stdin, a)
}

// TestIPAMHoldsNoNodeLock: while one ADD's IPAM hangs, another pod's ADD and
// DEL complete, a GC leaves the hung attachment alone (it is in flight) and
// a DEL of that attachment waits for its ADD; then everything is undone.
// Real netns and links, real host-local IPAM, fake RDMA netlink (this kernel
// has none).
func TestIPAMHoldsNoNodeLock(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 2, false, "shared")
	stall := stallingIPAM{IPAM: e.p.IPAM, container: "slow", entered: make(chan struct{}), release: make(chan struct{})}
	e.p.IPAM = stall
	slowPod, fastPod := netnstest.New(t), netnstest.New(t)
	before := e.snapshot(slowPod, fastPod)
	conf := func(dev int) []byte {
		return e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+pciAddr(dev)+`"},`+e.ipam("10.20.0.0/24"))
	}
	released := false
	defer func() {
		if !released {
			close(stall.release)
		}
	}()

	addDone := make(chan error, 1)
	go func() {
		_, err := e.p.Add(context.Background(), args("slow", slowPod, "net1", conf(0)))
		addDone <- err
	}()
	select {
	case <-stall.entered:
	case err := <-addDone:
		t.Fatalf("slow ADD returned before its IPAM: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("slow ADD never reached IPAM")
	}

	// Another pod: ADD and DEL while the slow ADD's IPAM hangs.
	done := make(chan error, 1)
	go func() {
		if _, err := e.p.Add(context.Background(), args("fast", fastPod, "net1", conf(1))); err != nil {
			done <- err
			return
		}
		done <- e.p.Del(context.Background(), args("fast", fastPod, "net1", conf(1)))
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fast pod: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fast pod's ADD+DEL blocked by another attachment's IPAM")
	}

	// GC with no valid attachment: the slow one is in flight, not garbage.
	gc := e.conf("1.1.0", `"cni.dev/valid-attachments":[]`)
	if err := e.p.GC(context.Background(), args("", nil, "", gc)); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := (attachment.Store{Dir: e.stateDir, BootID: "test-boot"}).Load(attachment.Key{ContainerID: "slow", IfName: "net1"}); err != nil {
		t.Fatalf("GC freed the attachment in flight: %v", err)
	}
	if got := netnstest.Links(t, slowPod); len(got) != 1 || got[0].Name != "net1" {
		t.Fatalf("slow pod links after GC: %+v", got)
	}

	// DEL of the slow attachment waits for its ADD.
	delDone := make(chan error, 1)
	go func() { delDone <- e.p.Del(context.Background(), args("slow", slowPod, "net1", conf(0))) }()
	select {
	case err := <-delDone:
		t.Fatalf("DEL of an attachment whose ADD is in flight returned first: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(stall.release)
	released = true
	if err := <-addDone; err != nil {
		t.Fatalf("slow ADD: %v", err)
	}
	if err := <-delDone; err != nil {
		t.Fatalf("slow DEL: %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot(slowPod, fastPod)); diff != "" {
		t.Errorf("after both DELs (-before +after):\n%s", diff)
	}
	if ents, _ := filepath.Glob(filepath.Join(e.stateDir, "*.lock")); len(ents) != 0 {
		t.Errorf("hold files left: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, "lock")); err != nil {
		t.Errorf("node-wide lock file: %v", err)
	}
}
