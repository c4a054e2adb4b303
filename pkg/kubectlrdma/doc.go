// Package kubectlrdma is the kubectl plugin (`kubectl rdma`): it reads the
// RDMANodeState objects the kube-rdma daemons publish, with Nodes and Pods,
// and renders them for people (nodes, topo, pods, doctor) in kubectl's
// conventions (genericclioptions flags, -o table|wide|json|yaml, exit 0 ok,
// 1 error, 2 usage).
//
// It never creates, patches or deletes an object. doctor execs a probe
// script that only reads into containers; bw execs ib_write_bw in two pods.
// It talks to the API server through the Cluster interface it declares; the
// binary's main only wires streams and the process exit code.
package kubectlrdma
