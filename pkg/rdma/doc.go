// Package rdma performs the netlink operations the CNI plugin needs on a
// node: reading and moving netdevs between network namespaces (move, rename,
// MTU, MAC and up state in a single request), reading the RDMA subsystem's
// netns mode, moving RDMA devices between namespaces, creating soft-RoCE
// (rxe) links, creating and deleting child netdevs (macvlan, ipvlan, IPoIB) of a
// shared NIC's netdev directly in a pod's namespace, and putting addresses and routes on a netdev. Every operation takes the namespace it acts in and uses a
// netlink socket bound to it (netlink.NewHandleAt), never switching the
// calling thread's namespace; where the calling thread is in that namespace
// already, the socket is opened there without entering it (nsat.go: entering
// needs CAP_SYS_ADMIN).
//
// It does not choose devices, keep state or log.
package rdma
