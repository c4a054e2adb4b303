//go:build !linux

package discovery

import "golang.org/x/sys/unix"

// rawPread reads from fd at offset 0 into b (raw_linux.go says why raw).
func rawPread(fd int, b []byte) (int, error) { return unix.Pread(fd, b, 0) }

// openNoATime opens path read-only (raw_linux.go: without touching atime).
func openNoATime(path string) (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) }
