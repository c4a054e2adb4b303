package rdma_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// TestOwnNetnsWithoutSysAdmin: a process with CAP_NET_ADMIN alone (the node
// agent's reclaimer in the chart) reads and changes links of the namespace
// it runs in through a handle of that namespace: entering it would need
// CAP_SYS_ADMIN, and every reclaim pass failed on it before. The test runs
// itself again under setpriv with every capability but CAP_NET_ADMIN
// dropped from the bounding set, as the chart's container is.
func TestOwnNetnsWithoutSysAdmin(t *testing.T) {
	if os.Getenv("KUBE_RDMA_TEST_NET_ADMIN_ONLY") == "1" {
		own, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = own.Close() }()
		if err := unix.Setns(int(own), unix.CLONE_NEWNET); !errors.Is(err, unix.EPERM) {
			t.Fatalf("setns into the own netns = %v, want EPERM: the test does not run without CAP_SYS_ADMIN", err)
		}
		var d rdma.Netdevs
		lo, err := d.Get(own, "lo")
		if err != nil {
			t.Fatalf("read lo through a handle of the own netns: %v", err)
		}
		if _, err := d.Set(own, lo.Name, rdma.LinkConfig{Name: lo.Name, MTU: lo.MTU, Up: lo.Up}); err != nil {
			t.Fatalf("set lo's state through a handle of the own netns: %v", err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: it drops every capability but CAP_NET_ADMIN from a child (setpriv)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not found")
	}
	cmd := exec.Command(setpriv, "--bounding-set=-all,+net_admin", "--inh-caps=-all", "--",
		os.Args[0], "-test.run=^TestOwnNetnsWithoutSysAdmin$", "-test.v")
	cmd.Env = append(os.Environ(), "KUBE_RDMA_TEST_NET_ADMIN_ONLY=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("the child with CAP_NET_ADMIN only: %v\n%s", err, out)
	}
}
