package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// StateVersion is the layout of RDMANodeStateStatus this package writes and
// reads. A writer sets status.stateVersion to it; a reader refuses a higher
// value (a newer daemon) with a message naming both, and reads every lower
// one it still lists in its docs. Bump it when a field changes meaning or is
// removed; adding an optional field does not need a bump.
const StateVersion = 1

// RDMANodeState is what the device plugin daemon on one node sees and serves.
// Its name is the node's name.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=rns,categories=kube-rdma
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Netns",type=string,JSONPath=`.status.rdmaNetnsMode`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.status.summary.devices`
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.summary.unhealthy`
// +kubebuilder:printcolumn:name="Daemon",type=string,JSONPath=`.status.daemonVersion`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.lastUpdate`
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.status.summary.table.pools`,priority=1
// +kubebuilder:printcolumn:name="Unhealthy Devices",type=string,JSONPath=`.status.summary.table.unhealthyDevices`,priority=1
// +kubebuilder:printcolumn:name="Link",type=string,JSONPath=`.status.summary.table.linkLayers`,priority=1
// +kubebuilder:printcolumn:name="Last Update",type=string,JSONPath=`.status.lastUpdate`,priority=1
// +kubebuilder:printcolumn:name="State Version",type=integer,JSONPath=`.status.stateVersion`,priority=1
type RDMANodeState struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RDMANodeStateSpec   `json:"spec,omitempty"`
	Status RDMANodeStateStatus `json:"status,omitempty"`
}

// RDMANodeStateSpec names the node; everything else is status.
type RDMANodeStateSpec struct {
	// NodeName is the node this state describes (also the object's name).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	NodeName string `json:"nodeName"`
}

// RDMANodeStateStatus is the daemon's view of its node.
type RDMANodeStateStatus struct {
	// StateVersion is the layout of this status (StateVersion when written).
	StateVersion int `json:"stateVersion"`
	// DaemonVersion is the writing daemon's --version ("v0.3.0-12-gabcdef").
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	DaemonVersion string `json:"daemonVersion,omitempty"`
	// RDMANetnsMode is the kernel's RDMA netns mode: shared, exclusive or
	// unknown (no RDMA netlink).
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]*$`
	RDMANetnsMode string `json:"rdmaNetnsMode,omitempty"`
	// LastUpdate is when the daemon last wrote this status: on a change, and on a quiet node every --node-state-refresh (5 min).
	LastUpdate metav1.Time `json:"lastUpdate,omitempty"`
	// Summary counts for list views.
	Summary Summary `json:"summary"`
	// Devices are the node's RDMA devices in natural name order.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4096
	Devices []Device `json:"devices,omitempty"`
	// GPUs are the node's GPUs in PCI address order.
	// +listType=map
	// +listMapKey=pciAddress
	// +kubebuilder:validation:MaxItems=1024
	GPUs []GPU `json:"gpus,omitempty"`
	// Affinity is the GPU x NIC matrix: one row per GPU, in GPUs order.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	Affinity []AffinityRow `json:"affinity,omitempty"`
	// Pools are the configured pools with their counts.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Pools []Pool `json:"pools,omitempty"`
	// Allocations are the kubelet's current device allocations of this
	// daemon's resources (PodResources API List), one per pod container and
	// resource.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Allocations []Allocation `json:"allocations,omitempty"`
	// ConfigErrors are the problems of the pools file the daemon runs with
	// (overlaps, a shared pool in exclusive netns mode, a file it ignored).
	// A rejected reload's error joins its problems with newlines: the schema
	// bounds their length, not their characters.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=32768
	ConfigErrors []string `json:"configErrors,omitempty"`
	// CNI is the kube-rdma CNI plugin on the node as the chart installed
	// it; nil when the daemon was not told (an older daemon, or not run by
	// the chart).
	CNI *CNIStatus `json:"cni,omitempty"`
	// PodsWithoutNetdevs are the pods holding devices of a pool whose pods
	// get netdevs through the CNI plugin (the chained pool, gpuAligned
	// pools) that have no complete attachment of them past a grace period
	// after their sandbox was ready: created while the kube-rdma entry was
	// missing from the conflist (docs/device-plugin.md, "Fail closed").
	// Sorted by namespace, pod and pool.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1024
	PodsWithoutNetdevs []PodWithoutNetdevs `json:"podsWithoutNetdevs,omitempty"`
	// Claims are the DRA claims the daemon's DRA front end prepared on the
	// node (its claim records), with the pods they were reserved for and
	// the devices they hold. Sorted by namespace, name and UID; empty
	// without --dra, and in the states of daemons that did not say.
	// +listType=map
	// +listMapKey=uid
	// +kubebuilder:validation:MaxItems=1024
	Claims []Claim `json:"claims,omitempty"`
	// GivenUp are the NICs the CNI plugin gave up on this node since the
	// daemon started, newest first, at most 32 of the last 24 hours: a
	// DEL, GC or the daemon's reclaimer ended a pod's attachment without
	// the NIC because it could not come back (its PCI function or
	// auxiliary device gone, its netdev removed while the pod had it) or
	// did not within the bound. Each is also logged, counted in
	// kube_rdma_cni_devices_given_up_total and posted as an Event on its
	// pod. Empty in the states of daemons that did not say.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	GivenUp []DeviceGivenUp `json:"givenUp,omitempty"`
}

// DeviceGivenUp is one NIC the CNI plugin gave up on.
type DeviceGivenUp struct {
	// Time is when the plugin gave it up.
	Time metav1.Time `json:"time"`
	// Command is DEL, GC or reclaim (the daemon's reclaimer of attachments
	// whose DEL never came).
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[A-Za-z]*$`
	Command string `json:"command"`
	// Device is its RDMA device name.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	Device string `json:"device"`
	// Netdev is its netdev's name on the host when it was attached.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	Netdev string `json:"netdev,omitempty"`
	// Function is its PCI function (an SF: its auxiliary device).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	Function string `json:"function,omitempty"`
	// Reason is function-gone (its function is no longer on the node),
	// vanished (its netdev was neither in the pod nor on the host) or
	// not-back (its function is there, its netdev did not come back in
	// time).
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z-]*$`
	Reason string `json:"reason"`
	// Namespace and Pod name the pod that had it, when its attachment
	// record did.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$`
	Pod string `json:"pod,omitempty"`
}

// Claim is one prepared DRA claim of the driver rdma.kube-rdma.io.
type Claim struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	UID string `json:"uid"`
	// Pods are the pods the claim was reserved for when it was prepared
	// (the claim's status.reservedFor then, as its record keeps it), in the
	// claim's namespace, sorted by UID. A pod that reserved the claim after
	// the kubelet prepared it on the node is not in the record, so not
	// here: the claim's own status.reservedFor is the whole list.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Pods []ClaimPod `json:"pods,omitempty"`
	// Devices are the claim's devices of the driver, in the claim's order.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	Devices []ClaimDevice `json:"devices"`
}

// ClaimPod is one pod a claim was reserved for.
type ClaimPod struct {
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	UID string `json:"uid"`
	// Name is the pod's name when the daemon knows it: the CNI plugin's
	// attachment record of the pod names it. Empty otherwise (the record of
	// a claim keeps the pods' UIDs only); kubectl rdma finds the pod by UID.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
}

// ClaimDevice is one device allocated to a claim.
type ClaimDevice struct {
	// Request is the claim's request ("request" or "request/subrequest").
	// +kubebuilder:validation:MaxLength=127
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9/]*[a-z0-9])?$`
	Request string `json:"request"`
	// Pool and Device are the DRA pool ("<node>/<pool>") and device names
	// of the allocation.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9./]*[a-z0-9])?$`
	Pool string `json:"pool"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Device string `json:"device"`
	// RDMADevice is the device's RDMA name in status.devices (the same
	// device found by PCI address or auxiliary device, so a rename since
	// Prepare shows); the name at Prepare when the node no longer has it.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]*$`
	RDMADevice string `json:"rdmaDevice,omitempty"`
	// AdminAccess: allocated for monitoring or maintenance alongside the
	// claim that uses the device; it does not hold the device (not counted
	// in the device's shares).
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// Shares is how many DRA claims hold a device, of how many it admits.
type Shares struct {
	// Used is the number of claims in status.claims that hold the device
	// (adminAccess claims not counted).
	Used int `json:"used"`
	// Capacity is how many claims the device admits at once when its pool
	// shares it through DRA consumable capacity; 0 (absent) when it is
	// not published: an exclusive dra pool's device admits one claim.
	Capacity int `json:"capacity,omitempty"`
}

// PodWithoutNetdevs is one pod and pool whose devices the CNI plugin did
// not attach.
type PodWithoutNetdevs struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Pod string `json:"pod"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Pool string `json:"pool"`
	// Why is how the pool's pods get netdevs: "chained CNI", "DRA chained CNI" or
	// "gpuAligned".
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z ]*$`
	Why string `json:"why"`
	// Devices are the pod's devices of the pool no attachment names (RDMA
	// names; a gpuAligned pool's slot IDs).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.:/=-]+$`
	Devices []string `json:"devices"`
	// Since is when the pod's sandbox was ready (its
	// PodReadyToStartContainers condition), or when the daemon first found
	// the pod without them when it could not read the pod.
	Since metav1.Time `json:"since"`
}

// CNIStatus says how the kube-rdma CNI plugin is set up on the node.
type CNIStatus struct {
	// Mode is the chart's cni.mode when it installs the plugin ("chained",
	// "multus", "none": the binary only), "not-installed" when it does not.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z-]*$`
	Mode string `json:"mode"`
	// ChainedPool is the pool whose devices the chained entry attaches
	// (cni.chained.pool) in chained mode; empty otherwise, and in the states
	// of daemons that did not say.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	ChainedPool string `json:"chainedPool,omitempty"`
	// Attachments counts the plugin's complete attachment records (pods'
	// network attachments it holds on the node now).
	Attachments int `json:"attachments"`
}

// Summary is a few counts over the status.
type Summary struct {
	Devices   int `json:"devices"`
	Unhealthy int `json:"unhealthy"`
	GPUs      int `json:"gpus"`
	Pods      int `json:"pods"`
	// Claims counts status.claims.
	Claims int `json:"claims,omitempty"`
	// Table is what a list view prints of the status, as text, so that the
	// API server can serve it as table columns (the CRD's printer columns
	// of priority 1: kubectl get rdmanodestates -o wide, and kubectl rdma
	// nodes, which asks for the table instead of the objects). Nil in the
	// states of daemons that predate it.
	Table *SummaryTable `json:"table,omitempty"`
}

// SummaryTable is the text of a node's list-view columns (NewSummaryTable).
// Its fields are always written, empty or not: a reader of the API server's
// table tells a missing column (an older daemon) from an empty one.
type SummaryTable struct {
	// Pools is each pool as "NAME ALLOCATED/ALLOCATABLE/CAPACITY", in
	// status.pools order, separated by ", ".
	// +kubebuilder:validation:MaxLength=1048576
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	Pools string `json:"pools"`
	// UnhealthyDevices are the names of the unhealthy devices, separated by
	// commas.
	// +kubebuilder:validation:MaxLength=1048576
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	UnhealthyDevices string `json:"unhealthyDevices"`
	// LinkLayers are the devices' link layers, sorted, separated by commas.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	LinkLayers string `json:"linkLayers"`
}

// Device is one RDMA device.
type Device struct {
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	Name string `json:"name"`
	// Kind is PF, VF, SF or virtual.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z]+$`
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PCIAddress string `json:"pciAddress,omitempty"`
	// NUMANode is -1 when unknown.
	NUMANode int `json:"numaNode"`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$`
	PCIeRoot string `json:"pcieRoot,omitempty"`
	// LinkLayer is port 1's: InfiniBand or Ethernet.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 _.:()/+-]*$`
	LinkLayer string `json:"linkLayer,omitempty"`
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[^\s/:\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]+$`
	Netdevs []string `json:"netdevs,omitempty"`
	// Healthy is what the daemon tells the kubelet: every port ACTIVE.
	Healthy bool `json:"healthy"`
	// Pools are the pools the device is in.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Pools []string `json:"pools,omitempty"`
	// +listType=map
	// +listMapKey=port
	// +kubebuilder:validation:MaxItems=256
	Ports []Port `json:"ports,omitempty"`
	// Shares is how many DRA claims hold the device now (status.claims
	// names them); absent when none does.
	Shares *Shares `json:"shares,omitempty"`
}

// Port is one port of a device.
type Port struct {
	Port int `json:"port"`
	// State is ACTIVE, DOWN, INIT or ARMED; PhysState LinkUp, Disabled, ...
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 _.:()/+-]*$`
	State string `json:"state"`
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 _.:()/+-]*$`
	PhysState string `json:"physState,omitempty"`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 _.:()/+-]*$`
	LinkLayer string `json:"linkLayer,omitempty"`
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9 _.:()/+-]*$`
	Rate string `json:"rate,omitempty"`
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^\s/:\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]+$`
	Netdev string `json:"netdev,omitempty"`
	// RoCEv2GIDIndex is the index NCCL_IB_GID_INDEX would name for this port
	// (the first RoCE v2 GID with an IPv4-mapped address, else the first
	// RoCE v2 GID); absent on InfiniBand or with no RoCE v2 GID.
	RoCEv2GIDIndex *int `json:"rocev2GIDIndex,omitempty"`
}

// GPU is one GPU.
type GPU struct {
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PCIAddress string `json:"pciAddress"`
	// UUID is the NVIDIA GPU UUID, when the driver reports it.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:/-]+$`
	UUID string `json:"uuid,omitempty"`
	// Minor is the NVIDIA device minor (/dev/nvidiaN).
	Minor    *int `json:"minor,omitempty"`
	NUMANode int  `json:"numaNode"`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^pci[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}$`
	PCIeRoot string `json:"pcieRoot,omitempty"`
}

// AffinityRow is one GPU's PCIe distance to every device.
type AffinityRow struct {
	// GPU is the GPU's PCI address.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	GPU string `json:"gpu"`
	// Levels are PIX, PXB, PHB, NODE or SYS (nvidia-smi topo -m), one per
	// device in status.devices order.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=4
	// +kubebuilder:validation:items:Pattern=`^(PIX|PXB|PHB|NODE|SYS)?$`
	Levels []string `json:"levels"`
}

// Pool is one configured pool: one extended resource.
type Pool struct {
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Name string `json:"name"`
	// Resource is the extended resource name (rdma.kube-rdma.io/ib).
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Resource string `json:"resource"`
	// Mode is exclusive or shared.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z]*$`
	Mode string `json:"mode"`
	// Slots is the number of pods a shared pool serves; 0 for exclusive.
	Slots int `json:"slots,omitempty"`
	// NoNCCL: the pool does not set NCCL's variables in its containers
	// (config nccl: false); they name its devices in KUBE_RDMA_<POOL>_*
	// only. False in the states of daemons that set them for every pool.
	NoNCCL bool `json:"noNCCL,omitempty"`
	// Capacity is what the daemon advertises; Allocatable the healthy part
	// of it; Allocated what the kubelet has given to pods.
	Capacity    int `json:"capacity"`
	Allocatable int `json:"allocatable"`
	Allocated   int `json:"allocated"`
	// Devices are the RDMA device names in the pool.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.:-]+$`
	Devices []string `json:"devices,omitempty"`
}

// Allocation is one container's devices of one resource.
type Allocation struct {
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Pod string `json:"pod"`
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Container string `json:"container"`
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	Resource string `json:"resource"`
	// DeviceIDs are the kubelet device IDs (PCI addresses; shared-pool slot
	// IDs for a shared pool).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.:/-]+$`
	DeviceIDs []string `json:"deviceIDs"`
	// RDMADevices and Netdevs are the devices those IDs name.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9_.:-]+$`
	RDMADevices []string `json:"rdmaDevices,omitempty"`
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[^\s/:\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]+$`
	Netdevs []string `json:"netdevs,omitempty"`
	// Attached are those of the devices the kube-rdma CNI plugin attached to
	// the pod's network namespace, with their names there (from the
	// plugin's attachment records). Empty for a device no CNI attachment
	// names (a shared pool's, or without the plugin).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Attached []AttachedDevice `json:"attached,omitempty"`
}

// AttachedDevice is one device the CNI plugin attached to a pod.
type AttachedDevice struct {
	// RDMADevice is the device's name on the node.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	RDMADevice string `json:"rdmaDevice"`
	// PodRDMADevice is its name in the pod when that differs (a software
	// RDMA device, re-created on the netdev in the pod).
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_.:-]+$`
	PodRDMADevice string `json:"podRDMADevice,omitempty"`
	// Netdev is the netdev's name on the node before it moved.
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^\s/:\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]+$`
	Netdev string `json:"netdev,omitempty"`
	// PodNetdev is the netdev's name in the pod (the attachment's ifName).
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^\s/:\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]+$`
	PodNetdev string `json:"podNetdev"`
	// Network is the CNI network (the NetworkAttachmentDefinition's name
	// with Multus).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[^\x00-\x1f\x7f-\x9f\x{200b}-\x{200f}\x{202a}-\x{202e}\x{2066}-\x{2069}\x{feff}]*$`
	Network string `json:"network,omitempty"`
}

// RDMANodeStateList is a list of RDMANodeState.
//
// +kubebuilder:object:root=true
type RDMANodeStateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RDMANodeState `json:"items"`
}
