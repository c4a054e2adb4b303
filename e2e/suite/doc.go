// Package suite is the cluster end-to-end suite: it runs against any cluster
// named by E2E_KUBECONFIG (the node hook and helm named by E2E_* variables do what
// the API cannot) and checks what a pod gets from kube-rdma: allocatable
// resources, device nodes, environment, netdevs, the locked-memory limit a
// non-root container gets through NRI, the NICs a gpuAligned pool binds next
// to a pod's GPUs (gpualigned_test.go), and that they survive port
// flaps, kubelet and DaemonSet restarts, helm upgrades and uninstall; and for
// pools served as a DRA driver (dra_test.go), what a claim gets: from a
// template, aligned with a GPU by matchAttribute, around a tainted device,
// through an extended resource, and how fast against the device plugin; that a
// real Prometheus (Debian's prometheus binary, when present) scrapes the daemon and
// finds the CNI plugin's operations there (prometheus_test.go); and an upgrade from
// the previous release, its rollback and the upgrade again while pods are created
// (upgrade_test.go): every pod that runs has what it asked for, running pods stay; and
// faults (faults_test.go, faultcases_test.go: the CNI plugin killed mid-ADD, a torn
// attachment record, a chained pod's NIC removed while it ran, a record of a previous boot, a 0.3.1 primary conflist, RDMA netlink down
// under a 1.1.0 primary conflist, the daemon killed during ADDs, the kubelet restarted during pod starts, the API server down 60 s),
// each followed by one invariant check: nothing lost, nothing stuck, running pods intact,
// a pod that could not get its NIC failed loudly.
//
// TestCluster (phases_test.go) runs them in phases, in order: each installs the chart
// with values built here, runs its tests, uninstalls and checks the node is as before.
// Which phases, their values and their expected answers come from the harness the node
// hook describes (localnode_test.go, kindrxe_test.go, rxecluster_test.go), not from the
// environment.
//
// Everything is in _test.go files; without E2E_KUBECONFIG, or with E2E_SKIP=1,
// every cluster test skips. The environment contract is in main_test.go.
package suite
