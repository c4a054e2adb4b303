package discovery

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// The idle health poll's system calls (a pread per port, the class
// directory's getdents) are made raw: without the Go runtime's entersyscall.
// The first entersyscall after the runtime's monitor thread (sysmon) went to
// sleep wakes it, and it then polls every 20 us while anything runs, about
// 50 wake-ups per round: on the 1,024-device node about a tenth of the idle
// daemon's CPU (perf of hack/dp-idle.sh). These calls wait for no peer: a
// sysfs attribute is generated on read, at worst by a driver asking its
// firmware (mlx5: tens of microseconds). A raw call keeps its P for that
// long; the other goroutines run on the other Ps (Go's default GOMAXPROCS is
// at least 2 on a node with 2 CPUs or more, a CPU limit included), and the
// goroutine can be preempted between two calls as usual.

// rawPread reads from fd at offset 0 into b.
func rawPread(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PREAD64, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawGetdents reads directory entries of fd into b.
func rawGetdents(fd int, b []byte) (int, error) {
	n, _, errno := unix.RawSyscall(unix.SYS_GETDENTS64, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// rawRewind moves fd back to its start.
func rawRewind(fd int) error {
	if _, _, errno := unix.RawSyscall(unix.SYS_LSEEK, uintptr(fd), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// openNoATime opens path to read it repeatedly, without updating its access
// time where the caller may ask that (owner or CAP_FOWNER): sysfs keeps no
// access times, but on a file system that does (the synthetic node's
// fixture, a copy of sysfs) every read would check and touch it, about a
// tenth of the idle poll's CPU there.
func openNoATime(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if err == unix.EPERM {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	return fd, err
}
