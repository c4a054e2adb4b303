// Package pageout lets a long-running binary hand the kernel back the pages
// of its own executable that only its start-up touched.
//
// Why: the device plugin daemon's idle RSS on the 1,024-device synthetic node
// was 33 MB, of which 23 MB were clean pages of the binary itself (code and
// read-only data mapped from the file) and 10 MB its heap and stacks. Nearly
// all of those 23 MB are touched once, by package initialisation (client-go's
// scheme registers every API group, protobuf and Prometheus register their
// descriptors) and by the first scan, and never again: paging them out with
// madvise(MADV_PAGEOUT) and letting the idle loop fault back what it uses
// leaves about 3 MB of the binary resident (hack/dp-idle.sh, docs/weight.md).
// The pages are clean, so paging out costs no I/O; a page needed again is a
// minor fault while it is in the page cache, a read of the binary otherwise.
//
// It reads the executable's ELF program headers (debug/elf on the file
// os.Executable names) and the auxiliary vector (where the kernel mapped
// them), touches no other file, and advises only the read-only segments.
// Linux only; kernels before 5.4 have no MADV_PAGEOUT and get an error.
package pageout

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// atPHDR is AT_PHDR, the auxiliary vector key of the program headers' address.
const atPHDR = 3

// Segment is one read-only PT_LOAD segment of the running executable, as
// mapped in this process.
type Segment struct {
	Addr, Len uintptr
	Exec      bool
}

// Segments returns the read-only loadable segments of the running
// executable, page-aligned, at the addresses they are mapped at.
func Segments() ([]Segment, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("pageout: %w", err)
	}
	fh, err := os.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("pageout: %w", err)
	}
	defer func() { _ = fh.Close() }()
	f, err := elf.NewFile(fh)
	if err != nil {
		return nil, fmt.Errorf("pageout: %s: %w", exe, err)
	}
	bias, err := loadBias(f, fh)
	if err != nil {
		return nil, err
	}
	page := uintptr(os.Getpagesize())
	var segs []Segment
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W != 0 || p.Memsz == 0 {
			continue
		}
		start := (uintptr(p.Vaddr) + bias) &^ (page - 1)
		end := (uintptr(p.Vaddr) + bias + uintptr(p.Memsz) + page - 1) &^ (page - 1)
		segs = append(segs, Segment{Addr: start, Len: end - start, Exec: p.Flags&elf.PF_X != 0})
	}
	if len(segs) == 0 {
		return nil, errors.New("pageout: the executable has no read-only loadable segment")
	}
	return segs, nil
}

// loadBias is where the kernel put the executable relative to the addresses
// in its file: 0 for a non-PIE binary (what `make build` makes), the random
// base of a PIE one. The auxiliary vector's AT_PHDR is the mapped address of
// the program headers, which the file puts at Phoff in the segment that maps
// offset 0.
func loadBias(f *elf.File, r io.ReaderAt) (uintptr, error) {
	auxv, err := unix.Auxv()
	if err != nil {
		return 0, fmt.Errorf("pageout: auxiliary vector: %w", err)
	}
	var phdr uintptr
	for _, kv := range auxv {
		if kv[0] == atPHDR {
			phdr = kv[1]
		}
	}
	if phdr == 0 {
		return 0, errors.New("pageout: no AT_PHDR in the auxiliary vector")
	}
	phoff, err := programHeaderOffset(f, r)
	if err != nil {
		return 0, err
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			return phdr - uintptr(p.Vaddr) - phoff, nil
		}
	}
	return 0, errors.New("pageout: no loadable segment maps the ELF header")
}

// programHeaderOffset is e_phoff, which debug/elf does not export (64, the
// header's size, in the executables the Go linker writes).
func programHeaderOffset(f *elf.File, r io.ReaderAt) (uintptr, error) {
	if f.Class != elf.ELFCLASS64 {
		return 0, fmt.Errorf("pageout: %s executables are not supported", f.Class)
	}
	var b [8]byte
	// e_phoff is at offset 32 of an Elf64_Ehdr.
	if _, err := r.ReadAt(b[:], 32); err != nil {
		return 0, fmt.Errorf("pageout: ELF header: %w", err)
	}
	return uintptr(f.ByteOrder.Uint64(b[:])), nil
}

// Release advises the kernel to page out every read-only segment of the
// running executable and returns how many bytes it advised. Pages the
// process still uses come back on their next touch.
func Release() (uintptr, error) {
	segs, err := Segments()
	if err != nil {
		return 0, err
	}
	var n uintptr
	for _, s := range segs {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, s.Addr, s.Len, unix.MADV_PAGEOUT); e != 0 {
			return n, fmt.Errorf("pageout: madvise(MADV_PAGEOUT) of %d bytes at %#x: %w", s.Len, s.Addr, e)
		}
		n += s.Len
	}
	return n, nil
}
