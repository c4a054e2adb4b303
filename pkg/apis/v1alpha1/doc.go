// Package v1alpha1 is the kube-rdma API: RDMANodeState, one cluster-scoped
// object per node (named after the node, owned by the Node object) in which
// the node's device plugin daemon publishes what it sees and serves: devices
// and ports with health, GPUs and the GPU x NIC PCIe affinity, pools with
// capacity, allocatable and allocated, and the kubelet's current allocations
// per pod. Readers (kubectl rdma, dashboards) only read it; the daemon is its
// only writer (server-side apply, field manager "kube-rdma-device-plugin").
//
// Everything is in the status subresource; status.stateVersion says which
// layout of it the writer used (StateVersion), so a reader can refuse a
// newer layout it does not understand instead of misreading it.
//
// +kubebuilder:object:generate=true
// +groupName=rdma.kube-rdma.io
// +groupGoName=RDMA
package v1alpha1
