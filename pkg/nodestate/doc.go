// Package nodestate publishes the agent's view of its node as the
// RDMANodeState object named after the node (pkg/apis/v1alpha1): devices,
// ports and health, GPUs and the GPU x NIC affinity, pools with capacity,
// allocatable and allocated, the kubelet's current allocations of the
// daemon's resources (PodResources List), and with --dra the DRA claims
// prepared on the node (the DRA front end's claim records,
// pkg/hostapi/claimrecord, through the ClaimLister it is given): each claim's
// pods and devices, and each device's shares.
//
// Build turns one Input into a status and is pure. The Publisher decides
// when to write: on every change of the daemon's view and at each poll of
// the kubelet's allocations, at most once per interval (changes in between
// coalesce), only when the content (everything but lastUpdate) differs from
// what it last wrote, and again with backoff after a failed write, so it
// rides out an API server restart. It writes through the small Writer
// interface it declares.
//
// Client is the Writer for a real API server: the typed client and apply
// configurations generated from pkg/apis/v1alpha1 by k8s.io/code-generator
// (pkg/client, `make generate`), and client-go's core client for the Node.
// The daemon makes three kinds of requests (get the Node, apply the object,
// apply its status) with server-side apply, which needs no cache, informer
// or REST mapper, so not controller-runtime's client.
// Tests use controller-runtime's envtest for a real kube-apiserver and etcd.
//
// It does not read the node itself (the agent's view, agent.View, carries
// the node watcher's snapshot), does not choose or change devices, and never
// deletes the object: the Node owns it, and the garbage collector removes it
// with the Node. It observes the agent (pkg/agent) and imports no front end
// (pkg/deviceplugin, pkg/dra: internal/importrules).
package nodestate
