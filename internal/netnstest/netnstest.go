// Package netnstest creates throw-away network namespaces and veth links for
// tests that must move real netdevs, so they never touch the links of the
// machine's own namespace. It is imported only from _test.go files.
//
// Tests that use it run as root (CI), or, as any other user, re-run
// themselves as root in a user namespace where the kernel allows it
// (RequireNetAdmin), and skip with the reason otherwise.
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NS is a network namespace bind-mounted on a file, as a runtime creates a
// pod's namespace.
type NS struct {
	Path   string
	Handle netns.NsHandle

	once sync.Once
}

// New creates a namespace with only a loopback device, removed when the test
// ends. Run as another user than root, it first re-runs the test in a user
// namespace (see RequireNetAdmin).
func New(t testing.TB) *NS {
	t.Helper()
	RequireNetAdmin(t)
	path := filepath.Join(t.TempDir(), "netns")
	ns, err := create(path)
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		if err := ns.Remove(); err != nil {
			t.Errorf("remove netns %s: %v", ns.Path, err)
		}
	})
	return ns
}

func create(path string) (*NS, error) {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return nil, err
	}
	type res struct {
		h   netns.NsHandle
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// The thread is left locked (and so discarded by the runtime) if it
		// cannot get back to its namespace.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer func() { _ = orig.Close() }()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- res{err: fmt.Errorf("unshare: %w", err)}
			runtime.UnlockOSThread()
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		err = unix.Mount(src, path, "none", unix.MS_BIND, "")
		var h netns.NsHandle
		if err == nil {
			h, err = netns.GetFromPath(path)
		}
		if serr := netns.Set(orig); serr != nil {
			ch <- res{h: h, err: fmt.Errorf("return to original netns: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- res{h: h, err: err}
	}()
	r := <-ch
	if r.err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		return nil, r.err
	}
	ns := &NS{Path: path, Handle: r.h}
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	return ns, err
}

// Remove unmounts the namespace and closes the handle, so the kernel
// destroys it once nothing else holds it. It is safe to call twice.
func (n *NS) Remove() error {
	var err error
	n.once.Do(func() {
		_ = n.Handle.Close()
		if e := unix.Unmount(n.Path, unix.MNT_DETACH); e != nil && e != unix.EINVAL {
			err = e
		}
		_ = os.Remove(n.Path)
	})
	return err
}

// Veth creates a veth pair with both ends, name and peer, in ns, both down.
func Veth(t testing.TB, ns *NS, name, peer string) {
	t.Helper()
	h := Handle(t, ns)
	v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}
	if err := h.LinkAdd(v); err != nil {
		t.Fatalf("add veth %s/%s in %s: %v", name, peer, ns.Path, err)
	}
}

// Handle returns a netlink handle bound to ns, closed when the test ends.
func Handle(t testing.TB, ns *NS) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", ns.Path, err)
	}
	t.Cleanup(h.Close)
	return h
}

// Link is what tests compare of a netdev.
type Link struct {
	Name string
	MTU  int
	Up   bool
	MAC  string
}

// Links returns the netdevs in ns other than lo, sorted by name.
func Links(t testing.TB, ns *NS) []Link {
	t.Helper()
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		t.Fatalf("netlink handle in %s: %v", ns.Path, err)
	}
	defer h.Close()
	ls, err := h.LinkList()
	if err != nil {
		t.Fatalf("list links in %s: %v", ns.Path, err)
	}
	var out []Link
	for _, l := range ls {
		a := l.Attrs()
		if a.Name == "lo" {
			continue
		}
		out = append(out, Link{Name: a.Name, MTU: a.MTU, Up: a.Flags&unix.IFF_UP != 0, MAC: a.HardwareAddr.String()})
	}
	slices.SortFunc(out, func(a, b Link) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Do runs fn on an OS thread switched into ns, so that processes fn starts
// are born in ns (os/exec forks from the calling thread). The thread is
// discarded if it cannot switch back.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = orig.Close() }()
		if err := netns.Set(n.Handle); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Path, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to original netns: %w", err))
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
