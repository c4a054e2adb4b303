package rdma

import (
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// handleAt is netlink.NewHandleAt(ns, protocols...), and socketAt
// nl.GetNetlinkSocketAt(ns, None, protocol), except that neither enters ns
// when the calling thread is in it already: the socket is then opened on
// that thread, locked meanwhile, without a setns. Entering a network
// namespace, even one's own, needs CAP_SYS_ADMIN; the node agent's
// reclaimer, which restores NICs in the host namespace with CAP_NET_ADMIN
// alone, failed on every pass with "failed to set into network namespace
// ... operation not permitted". The check is the calling thread's, not the
// process's: a test or a caller may hold other threads in other namespaces.
func handleAt(ns netns.NsHandle, protocols ...int) (*netlink.Handle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return netlink.NewHandleAt(threadIn(ns), protocols...)
}

func socketAt(ns netns.NsHandle, protocol int) (*nl.NetlinkSocket, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return nl.GetNetlinkSocketAt(threadIn(ns), netns.None(), protocol)
}

// threadIn is netns.None() when the calling thread (locked by the caller)
// is in ns, else ns.
func threadIn(ns netns.NsHandle) netns.NsHandle {
	if !ns.IsOpen() {
		return ns
	}
	var want, cur unix.Stat_t
	if unix.Fstat(int(ns), &want) != nil || unix.Stat("/proc/thread-self/ns/net", &cur) != nil ||
		want.Dev != cur.Dev || want.Ino != cur.Ino {
		return ns
	}
	return netns.None()
}
