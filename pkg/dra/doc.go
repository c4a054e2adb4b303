// Package dra is the Dynamic Resource Allocation front end's logic over the
// node agent's picture of the node (pkg/discovery, via pkg/nodewatch
// snapshots): the devices a pool publishes in ResourceSlices (stable names,
// the standard resource.kubernetes.io attributes and ours under
// kube-rdma.io), their taints from port state, and the preparation of a
// claim's devices for containers (a CDI spec per claim, with the device
// nodes and the NCCL environment of exactly the claimed NICs). A shared
// pool's devices are published for several claims at once through DRA
// consumable capacity, and each claim holding a share is prepared as its
// own (share.go).
//
// Building devices, names, attributes, capacity and taints is pure
// (slice.go, names.go, pool.go, share.go's Share); Preparer writes only the CDI and state directories it
// is given (prepare.go); Driver (driver.go) is the I/O edge: the
// kubeletplugin helper's gRPC services to the kubelet and the ResourceSlices
// it writes through the API server. The package reads no sysfs (the daemon
// hands it snapshots) and speaks no netlink. It does not choose devices: the
// scheduler does, from the published slices. It holds no package-level
// state.
package dra
