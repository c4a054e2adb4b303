package fakerdma

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/pkg/rdma"
)

// counting is an RDMA that counts its calls.
type counting struct{ n *int }

func (c counting) NetnsMode(netns.NsHandle) (rdma.NetnsMode, error) {
	*c.n++
	return rdma.NetnsExclusive, nil
}
func (c counting) List(netns.NsHandle) ([]string, error)             { *c.n++; return []string{"mlx5_0"}, nil }
func (c counting) Move(netns.NsHandle, string, netns.NsHandle) error { *c.n++; return nil }
func (c counting) AddRxe(netns.NsHandle, string, string) error       { *c.n++; return nil }
func (c counting) DelSoft(netns.NsHandle, string) error              { *c.n++; return nil }

// TestDown: every call passes to the RDMA it wraps while the file is
// absent; while it exists, every call fails with EPROTONOSUPPORT and the
// wrapped RDMA is not called.
func TestDown(t *testing.T) {
	n := 0
	d := Down{RDMA: counting{&n}, File: filepath.Join(t.TempDir(), "down")}
	calls := func() []error {
		_, e1 := d.NetnsMode(0)
		_, e2 := d.List(0)
		return []error{e1, e2, d.Move(0, "mlx5_0", 0), d.AddRxe(0, "rxe0", "eth0"), d.DelSoft(0, "rxe0")}
	}
	for i, err := range calls() {
		if err != nil {
			t.Errorf("call %d with the file absent: %v", i, err)
		}
	}
	if n != 5 {
		t.Fatalf("%d calls reached the wrapped RDMA, want 5", n)
	}
	if err := os.WriteFile(d.File, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, err := range calls() {
		if !errors.Is(err, unix.EPROTONOSUPPORT) {
			t.Errorf("call %d with the file present: %v, want EPROTONOSUPPORT", i, err)
		}
	}
	if n != 5 {
		t.Errorf("%d calls reached the wrapped RDMA while down, want 5", n)
	}
	if m, err := d.NetnsMode(0); err == nil || m != "" {
		t.Errorf("NetnsMode while down: %q, %v", m, err)
	}
}
