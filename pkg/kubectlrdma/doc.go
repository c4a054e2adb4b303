// Package kubectlrdma is the kubectl plugin (`kubectl rdma`): it reads the
// RDMANodeState objects the kube-rdma daemons publish, with Nodes and Pods,
// and renders them for people (nodes, topo, pods, doctor) in kubectl's
// conventions (genericclioptions flags, -o table|wide|json|yaml, exit 0 ok,
// 1 error, 2 usage).
//
// It never creates, patches or deletes an object, but for bw --image, which
// adds an ephemeral container to each of its two pods (the Debugger
// interface). doctor execs a probe script that only reads into containers;
// bw execs ib_write_bw in two pods.
// It talks to the API server through the Cluster interface it declares; the
// binary's main only wires streams and the process exit code.
//
// Every string it prints comes from objects a node's daemon (or a pod's
// container, through exec) wrote, so it is hostile input: a printer never
// writes one raw. The human printers (writePods, writeChecks,
// the topo table, bw's summary) take an escaped deep copy of their input
// where it enters them (escapeAll, escape.go), writeNodes escapes each cell
// it prints (its rows come from the API server's table): control characters, bidi and
// zero-width format characters and invalid UTF-8 become \x1b, \u202e,
// \xff. Errors are escaped on their one line (oneLine). -o json and -o yaml
// keep the data but escape what the encoders leave raw (encode.go). A new
// column reads from the escaped copy; a new printer must take one.
package kubectlrdma
