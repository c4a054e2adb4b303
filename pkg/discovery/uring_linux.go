package discovery

import (
	"io/fs"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is an io_uring that reads many small attributes per system call: one
// io_uring_enter opens a batch of files (and closes the previous batch's),
// one reads them. A sysfs attribute costs three system calls when read one
// by one, and on a paravirtualised VM a system call costs about as much as
// the work it asks for: on the 1,024-device node batching cuts the system
// calls of a scan by about six and its CPU by a third (BenchmarkScanURing
// compares the two paths of this code; figures in docs/device-plugin.md,
// "Discovery measurements").
//
// Where io_uring is missing or forbidden (kernels before 5.6, the default
// seccomp profile of container runtimes, io_uring_disabled) newRing fails
// and the scan reads one attribute at a time.
type ring struct {
	fd                   int
	sqMem, cqMem, sqeMem []byte
	sqTail, sqMask       *uint32
	cqHead, cqTail       *uint32
	cqMask               uint32
	cqes                 unsafe.Pointer
	entries              int
	buf                  []byte  // attrBuf bytes per entry, read into
	paths                []byte  // NUL-terminated paths of the batch
	pending              []int32 // files read, to close with the next batch
}

const (
	ringEntries = 256
	attrBuf     = 512 // as dir.read

	opOpenat = 18
	opClose  = 19
	opRead   = 22
	opNop    = 0

	enterGetEvents  = 1
	registerProbe   = 8
	featSingleMmap  = 1
	offSQRing       = 0
	offCQRing       = 0x8000000
	offSQEs         = 0x10000000
	probeOpSupports = 1
)

type uringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  struct {
		head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
		userAddr                                                        uint64
	}
	cqOff struct {
		head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
		userAddr                                                        uint64
	}
}

type sqe struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off           uint64
	addr          uint64
	len           uint32
	opFlags       uint32
	userData      uint64
	bufIndex      uint16
	personality   uint16
	fileIndex     uint32
	addr3         uint64
	pad           uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// newRing sets up a ring, or fails when io_uring or one of the operations
// it needs (openat, read, close: Linux 5.6) is not available.
func newRing() (*ring, error) {
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, ringEntries, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &ring{fd: int(fd), entries: int(p.sqEntries)}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	if err := r.probe(); err != nil {
		r.close()
		return nil, err
	}
	r.buf = make([]byte, r.entries*attrBuf)
	return r, nil
}

func (r *ring) mmap(p *uringParams) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(cqe{})))
	if p.features&featSingleMmap != 0 {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if r.sqMem, err = unix.Mmap(r.fd, offSQRing, sqSize, prot, flags); err != nil {
		return err
	}
	r.cqMem = r.sqMem
	if p.features&featSingleMmap == 0 {
		if r.cqMem, err = unix.Mmap(r.fd, offCQRing, cqSize, prot, flags); err != nil {
			return err
		}
	}
	if r.sqeMem, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), prot, flags); err != nil {
		return err
	}
	r.sqTail = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.tail]))
	r.sqMask = (*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.ringMask]))
	for i := range p.sqEntries { // the index array maps ring slot i to SQE i
		*(*uint32)(unsafe.Pointer(&r.sqMem[p.sqOff.array+4*i])) = i
	}
	r.cqHead = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&r.cqMem[p.cqOff.ringMask]))
	r.cqes = unsafe.Pointer(&r.cqMem[p.cqOff.cqes])
	return nil
}

func (r *ring) probe() error {
	// struct io_uring_probe: 16 bytes, then 8 bytes per operation.
	const nops = 64
	var buf [16 + 8*nops]byte
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerProbe, uintptr(unsafe.Pointer(&buf[0])), nops, 0, 0)
	if errno != 0 {
		return errno
	}
	for _, op := range []int{opOpenat, opClose, opRead} {
		if int(buf[0]) < op || buf[16+8*op+2]&probeOpSupports == 0 {
			return unix.EOPNOTSUPP
		}
	}
	return nil
}

func (r *ring) close() {
	if r == nil {
		return
	}
	if r.sqeMem != nil {
		r.flush()
	}
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && &r.cqMem[0] != &r.sqMem[0] {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	_ = unix.Close(r.fd)
}

// readAll reads every request's attribute as dir.read would, many per
// system call.
func (r *ring) readAll(reqs []attrReq) {
	for len(reqs) > 0 {
		if len(r.pending) > r.entries/2 {
			r.flush()
		}
		n := min(len(reqs), r.entries-len(r.pending))
		r.readBatch(reqs[:n])
		reqs = reqs[n:]
	}
}

// closeTag marks a close in user data: the files of one batch are closed in
// the io_uring_enter that opens the next batch's, which saves one system call
// per batch (io_uring_enter calls 9.3k to 6.2k on the 1,024-device node, when
// a device took three batches).
const closeTag = 1 << 32

func (r *ring) readBatch(reqs []attrReq) {
	r.paths = r.paths[:0]
	offs := make([]int, len(reqs))
	for i, q := range reqs {
		offs[i] = len(r.paths)
		r.paths = append(r.paths, q.d.pre...)
		r.paths = append(r.paths, q.rel...)
		r.paths = append(r.paths, 0)
	}
	fds := make([]int32, len(reqs))
	closing := len(r.pending)
	ok := r.run(closing+len(reqs), func(i int, e *sqe) {
		if i < closing {
			*e = sqe{opcode: opClose, fd: r.pending[i], userData: closeTag}
			return
		}
		i -= closing
		*e = sqe{opcode: opOpenat, fd: int32(reqs[i].d.fd), addr: uint64(uintptr(unsafe.Pointer(&r.paths[offs[i]]))),
			opFlags: unix.O_RDONLY | unix.O_CLOEXEC, userData: uint64(i)}
	}, func(i int, res int32) {
		if i < closeTag {
			fds[i] = res
		}
	})
	if !ok {
		r.fallback(reqs)
		return
	}
	r.pending = r.pending[:0]
	var open []int
	for i, fd := range fds {
		if fd < 0 {
			reqs[i].err = &fs.PathError{Op: "open", Path: filepath.Join(reqs[i].d.path, reqs[i].rel), Err: unix.Errno(-fd)}
			continue
		}
		open = append(open, i)
		r.pending = append(r.pending, fd)
	}
	ok = r.run(len(open), func(j int, e *sqe) {
		i := open[j]
		*e = sqe{opcode: opRead, fd: fds[i], addr: uint64(uintptr(unsafe.Pointer(&r.buf[i*attrBuf]))), len: attrBuf, userData: uint64(i)}
	}, func(i int, res int32) {
		if res < 0 {
			reqs[i].err = &fs.PathError{Op: "read", Path: filepath.Join(reqs[i].d.path, reqs[i].rel), Err: unix.Errno(-res)}
			return
		}
		reqs[i].val = attrValue(r.buf[i*attrBuf : i*attrBuf+int(res)])
	})
	if !ok {
		r.fallback(reqs)
	}
	runtime.KeepAlive(r)
}

// listDirs lists directories into c: the ring opens them all (and closes
// the previous batch's files) in one io_uring_enter; io_uring has no
// getdents, so listing stays a system call. A device's net/, ports/ and
// ports/1/gids/ cost 2 system calls each instead of 4.
func (r *ring) listDirs(c *attrCache, dirs []attrReq) {
	r.paths = r.paths[:0]
	offs := make([]int, len(dirs))
	for i, q := range dirs {
		offs[i] = len(r.paths)
		r.paths = append(r.paths, q.d.pre...)
		r.paths = append(r.paths, q.rel...)
		r.paths = append(r.paths, 0)
	}
	if len(r.pending)+len(dirs) > r.entries {
		r.flush()
	}
	fds := make([]int32, len(dirs))
	closing := len(r.pending)
	if !r.run(closing+len(dirs), func(i int, e *sqe) {
		if i < closing {
			*e = sqe{opcode: opClose, fd: r.pending[i], userData: closeTag}
			return
		}
		i -= closing
		*e = sqe{opcode: opOpenat, fd: int32(dirs[i].d.fd), addr: uint64(uintptr(unsafe.Pointer(&r.paths[offs[i]]))),
			opFlags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, userData: uint64(i)}
	}, func(i int, res int32) {
		if i < closeTag {
			fds[i] = res
		}
	}) {
		return // the readers list them one by one
	}
	r.pending = r.pending[:0]
	for i, q := range dirs {
		key := attrKey{q.d.fd, q.d.pre + q.rel}
		switch fd := fds[i]; {
		case fd == -int32(unix.ENOENT):
			c.lists[key] = listResult{}
		case fd < 0:
			c.lists[key] = listResult{err: &fs.PathError{Op: "open", Path: filepath.Join(q.d.path, q.rel), Err: unix.Errno(-fd)}}
		default:
			names, err := q.d.readNames(int(fd), q.rel)
			c.lists[key] = listResult{names, err}
			r.pending = append(r.pending, fd)
		}
	}
	runtime.KeepAlive(r)
}

// flush closes the files of the last batch.
func (r *ring) flush() {
	if !r.run(len(r.pending), func(i int, e *sqe) {
		*e = sqe{opcode: opClose, fd: r.pending[i], userData: closeTag}
	}, func(int, int32) {}) {
		for _, fd := range r.pending {
			_ = unix.Close(int(fd))
		}
	}
	r.pending = r.pending[:0]
}

// fallback reads one by one, after the ring failed.
func (r *ring) fallback(reqs []attrReq) {
	for i := range reqs {
		reqs[i].val, reqs[i].err = reqs[i].d.readNow(reqs[i].rel)
	}
}

// run queues n operations, submits them with one io_uring_enter and waits
// for their n completions. It reports false when the kernel refused the
// submission.
func (r *ring) run(n int, prep func(i int, e *sqe), done func(i int, res int32)) bool {
	if n == 0 {
		return true
	}
	tail := atomic.LoadUint32(r.sqTail)
	mask := *r.sqMask
	for i := range n {
		prep(i, (*sqe)(unsafe.Pointer(&r.sqeMem[int((tail+uint32(i))&mask)*int(unsafe.Sizeof(sqe{}))])))
	}
	atomic.StoreUint32(r.sqTail, tail+uint32(n))
	toSubmit, got, failures := n, 0, 0
	for got < n {
		m, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(n-got), enterGetEvents, 0, 0)
		switch {
		case errno == unix.EINTR || errno == unix.EAGAIN || errno == unix.EBUSY:
		case errno != 0 && toSubmit == n:
			atomic.StoreUint32(r.sqTail, tail) // the kernel took nothing
			return false
		case errno != 0:
			// Some operations ran and their results are lost: the
			// caller reads the batch again one by one (a file opened
			// here may stay open). Not seen in practice.
			if failures++; failures > 3 {
				return false
			}
		default:
			toSubmit -= int(m)
		}
		head, ctail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != ctail; head++ {
			c := (*cqe)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(cqe{})))
			done(int(c.userData), c.res)
			got++
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	return true
}

// preadStates reads every open file of files at offset 0 into its stateBuf
// slice of buf, its result (bytes or -errno) in res; closed files (fd < 0)
// get 0. It returns false when io_uring_enter failed: res is then unusable.
func (r *ring) preadStates(files []stateFile, buf []byte, res []int32) bool {
	for start := 0; start < len(files); start += r.entries {
		batch := files[start:min(len(files), start+r.entries)]
		ok := r.run(len(batch), func(i int, e *sqe) {
			j := start + i
			if batch[i].fd < 0 {
				*e = sqe{opcode: opNop, userData: uint64(j)}
				return
			}
			*e = sqe{opcode: opRead, fd: int32(batch[i].fd), addr: uint64(uintptr(unsafe.Pointer(&buf[j*stateBuf]))),
				len: stateBuf, userData: uint64(j)}
		}, func(j int, n int32) { res[j] = n })
		if !ok {
			return false
		}
	}
	runtime.KeepAlive(buf)
	return true
}
