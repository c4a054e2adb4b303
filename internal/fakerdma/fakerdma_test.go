package fakerdma

import (
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
)

// TestDevices: a device is listed only in the namespace it moved to, moves
// only from there, and concurrent processes' moves of different devices
// are all kept (the state file is changed under its lock).
func TestDevices(t *testing.T) {
	pod := netnstest.New(t)
	host, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = host.Close() }()
	d := Devices{StateFile: filepath.Join(t.TempDir(), "state.json")}

	if err := d.Move(pod.Handle, "mlx5_0", host); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("move from a netns the device is not in: %v, want ENODEV", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = d.Move(host, "mlx5_"+string(rune('0'+i)), pod.Handle) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got, err := d.List(pod.Handle)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"}
	if !slices.Equal(got, want) {
		t.Fatalf("in the pod: %q, want %q", got, want)
	}
	if err := d.Move(host, "mlx5_0", pod.Handle); !errors.Is(err, unix.ENODEV) {
		t.Fatalf("move a device that is not in the host any more: %v, want ENODEV", err)
	}
	if err := d.Move(pod.Handle, "mlx5_0", host); err != nil {
		t.Fatal(err)
	}
	if got, _ := d.List(pod.Handle); slices.Contains(got, "mlx5_0") {
		t.Fatalf("mlx5_0 moved back is still listed in the pod: %q", got)
	}
	if _, err := d.List(host); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Fatalf("list the host: %v, want EOPNOTSUPP", err)
	}
	if m, _ := d.NetnsMode(host); m != "exclusive" {
		t.Fatalf("mode %q", m)
	}
}
