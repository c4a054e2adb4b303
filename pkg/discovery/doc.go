// Package discovery reads a node's RDMA devices, GPUs and their PCIe
// affinity from sysfs and procfs trees rooted where the caller says
// (Scanner.SysRoot, Scanner.ProcRoot), so tests run on fixture trees.
//
// It owns parsing and the GPU<->NIC distance (Distance); it does no netlink,
// applies no policy and logs nothing: problems with one device come back as
// Node.Warnings, problems with the roots as errors.
package discovery
