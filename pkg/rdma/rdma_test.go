package rdma

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
)

// fakeLinks stands in for an RDMA netlink handle only because this test
// kernel has no RDMA subsystem: its dump answers list, and it records moves.
type fakeLinks struct {
	list  func() ([]*netlink.RdmaLink, error)
	moved []string
}

func (f *fakeLinks) RdmaLinkList() ([]*netlink.RdmaLink, error) { return f.list() }

func (f *fakeLinks) RdmaLinkSetNsFd(l *netlink.RdmaLink, _ uint32) error {
	f.moved = append(f.moved, l.Attrs.Name)
	return nil
}

// TestMoveLookupErrors: only a device missing from a complete dump is
// ErrDeviceNotFound; a dump that fails is reported as what it is.
func TestMoveLookupErrors(t *testing.T) {
	dev := func(n string) *netlink.RdmaLink { l := &netlink.RdmaLink{}; l.Attrs.Name = n; return l }
	for _, tc := range []struct {
		name     string
		list     func() ([]*netlink.RdmaLink, error)
		notFound bool
		is       error
		moved    bool
	}{
		{name: "found", list: func() ([]*netlink.RdmaLink, error) { return []*netlink.RdmaLink{dev("a"), dev("mlx5_0")}, nil }, moved: true},
		{name: "not in the dump", list: func() ([]*netlink.RdmaLink, error) { return []*netlink.RdmaLink{dev("a")}, nil }, notFound: true},
		{name: "permission denied", list: func() ([]*netlink.RdmaLink, error) { return nil, unix.EPERM }, is: unix.EPERM},
		{name: "socket error", list: func() ([]*netlink.RdmaLink, error) { return nil, unix.ENOBUFS }, is: unix.ENOBUFS},
		{name: "dump always interrupted", list: func() ([]*netlink.RdmaLink, error) {
			return []*netlink.RdmaLink{dev("a")}, netlink.ErrDumpInterrupted
		}, is: netlink.ErrDumpInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLinks{list: tc.list}
			err := move(f, "mlx5_0", netns.None())
			if got := errors.Is(err, ErrDeviceNotFound); got != tc.notFound {
				t.Errorf("move = %v; ErrDeviceNotFound %v, want %v", err, got, tc.notFound)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("move = %v, want it to wrap %v", err, tc.is)
			}
			if moved := len(f.moved) == 1; moved != tc.moved {
				t.Errorf("moved %v, want moved %v", f.moved, tc.moved)
			}
		})
	}
}

// TestMoveWithoutRDMA runs on a kernel without RDMA netlink (this test
// machine's): Move says so, and does not say the device is missing.
func TestMoveWithoutRDMA(t *testing.T) {
	netnstest.RequireNetAdmin(t) // Move enters the namespace (setns)
	ns, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ns.Close() }()
	err = Devices{}.Move(ns, "mlx5_0", ns)
	if !errors.Is(err, ErrNoRDMA) {
		t.Skipf("this kernel has RDMA netlink (Move: %v); the test is for one without", err)
	}
	if errors.Is(err, ErrDeviceNotFound) {
		t.Errorf("Move = %v, want ErrNoRDMA only", err)
	}
}
