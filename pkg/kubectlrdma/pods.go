package kubectlrdma

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"

	"github.com/kube-rdma/kube-rdma/pkg/apis/v1alpha1"
)

// GPUResource is the extended resource whose allocations, when the state
// carries them, give a pod's GPUs.
const GPUResource = "nvidia.com/gpu"

// PodAllocationList is what `pods -o json|yaml` prints.
type PodAllocationList struct {
	Items []PodAllocation `json:"items"`
}

// PodAllocation is one pod's RDMA devices and GPUs on its node.
type PodAllocation struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Node      string `json:"node"`
	// Resources are the kube-rdma resources the pod's containers request.
	Resources []string `json:"resources"`
	// Claims are the DRA claims of the pod's namespace that its node's
	// state says were prepared for it (status.claims), sorted.
	Claims []string `json:"claims,omitempty"`
	NICs   []NIC    `json:"nics"`
	// GPUs is empty when the state has no GPU allocation for the pod.
	GPUs []PodGPU `json:"gpus,omitempty"`
	// WorstLevel is the farthest GPU<->NIC PCIe level among the pod's
	// devices (PIX..SYS, ? for a pair the state lacks); empty without GPUs.
	WorstLevel string `json:"worstLevel,omitempty"`
	// Status is "allocated", or why there is no allocation.
	Status string `json:"status"`
	// Health is the worst of DeviceHealth (Unhealthy, Unknown, Healthy); empty when the
	// kubelet reports no health of the pod's kube-rdma devices.
	Health       string         `json:"health,omitempty"`
	DeviceHealth []DeviceHealth `json:"deviceHealth,omitempty"`
}

// NIC is one allocated RDMA device.
type NIC struct {
	Name   string `json:"name"`
	Netdev string `json:"netdev,omitempty"`
	// PodNetdev is the netdev's name in the pod when the CNI plugin moved
	// it there; PodName the RDMA device's when it differs (soft-RoCE).
	PodNetdev  string `json:"podNetdev,omitempty"`
	PodName    string `json:"podName,omitempty"`
	PCIAddress string `json:"pciAddress,omitempty"`
	NUMANode   int    `json:"numaNode"`
	// Resource is the extended resource the device plugin allocated it
	// under; "" for a DRA claim's.
	Resource string `json:"resource"`
	// Claim is the DRA claim (of the pod's namespace) that holds it; ""
	// for the device plugin's.
	Claim string `json:"claim,omitempty"`
}

// PodGPU is one allocated GPU; Index is its row in `topo` (GPU0..).
type PodGPU struct {
	Index      int    `json:"index"`
	PCIAddress string `json:"pciAddress"`
	UUID       string `json:"uuid,omitempty"`
}

func newPodsCommand(o *Options) *cobra.Command {
	var output string
	var all bool
	c := &cobra.Command{
		Use:   "pods [-n NAMESPACE | -A]",
		Short: "Show each pod's allocated NICs and GPUs and their worst PCIe distance",
		Long: `Shows every pod that requests a kube-rdma resource or holds a kube-rdma DRA
claim: its node, the RDMA devices the kubelet allocated to it or its claims
hold (name, netdev, PCI address), its GPUs (when the
node's RDMANodeState carries the pod's nvidia.com/gpu allocation; else "-")
and the worst GPU<->NIC level of that allocation from the node's affinity
matrix (PIX best .. SYS worst). -o wide adds HEALTH: the worst health the
kubelet reports in the pod's status for its kube-rdma devices (Healthy,
Unknown or Unhealthy; "-" when it reports none: kubelets before 1.36 report
it only with the ResourceHealthStatus feature gate on); -o json|yaml give
each device's.`,
		Example: `  kubectl rdma pods
  kubectl rdma pods -n training -o wide
  kubectl rdma pods -A -o json`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ns := ""
			if !all {
				var err error
				if ns, err = o.namespace(); err != nil {
					return err
				}
			}
			return o.runPods(c.Context(), ns, output)
		},
	}
	c.Flags().BoolVarP(&all, "all-namespaces", "A", false, "pods of every namespace")
	addOutputFlag(c, &output, outTable, outWide, outJSON, outYAML)
	return c
}

func (o *Options) runPods(ctx context.Context, ns, output string) error {
	cl, err := o.cluster()
	if err != nil {
		return err
	}
	// The two lists at once: the API server encodes one while this
	// process decodes the other.
	var states []v1alpha1.RDMANodeState
	var pods []corev1.Pod
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		states, err = cl.ListStates(gctx)
		return err
	})
	g.Go(func() error {
		var err error
		pods, err = cl.ListPods(gctx, ns)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	byNode := map[string]*v1alpha1.RDMANodeState{}
	for i := range states {
		if err := checkVersion(&states[i]); err != nil {
			return err
		}
		byNode[states[i].Name] = &states[i]
	}
	var l PodAllocationList
	for i := range pods {
		if a, ok := podAllocation(&pods[i], byNode); ok {
			l.Items = append(l.Items, a)
		}
	}
	sort.Slice(l.Items, func(i, j int) bool {
		a, b := l.Items[i], l.Items[j]
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Pod < b.Pod
	})
	if output == outJSON || output == outYAML {
		if l.Items == nil {
			l.Items = []PodAllocation{}
		}
		return writeObject(o.Streams.Out, l, output)
	}
	return writePods(o.Streams.Out, l.Items, ns == "", output == outWide)
}

func writePods(w io.Writer, items []PodAllocation, allNS, wide bool) error {
	items = escapedPods(items)
	tw := newTable(w)
	header := []string{"POD", "NODE", "NICS", "NETDEVS", "PCI", "GPUS", "WORST"}
	if allNS {
		header = append([]string{"NAMESPACE"}, header...)
	}
	if wide {
		header = append(header, "NUMA", "POD NETDEVS", "RESOURCES", "STATUS", "CLAIMS", "HEALTH")
	}
	row(tw, header...)
	for _, a := range items {
		var names, netdevs, pcis, numas, gpus, podNetdevs []string
		for _, n := range a.NICs {
			names, netdevs, pcis = append(names, n.Name), append(netdevs, dashed(n.Netdev)), append(pcis, dashed(n.PCIAddress))
			numas, podNetdevs = append(numas, numaString(n.NUMANode)), append(podNetdevs, dashed(n.PodNetdev))
		}
		for _, g := range a.GPUs {
			gpus = append(gpus, fmt.Sprintf("GPU%d", g.Index))
		}
		if len(a.NICs) == 0 {
			names = []string{"<" + a.Status + ">"}
		}
		cells := []string{a.Pod, a.Node, strings.Join(names, ","), strings.Join(netdevs, ","), strings.Join(pcis, ","),
			strings.Join(gpus, ","), a.WorstLevel}
		if allNS {
			cells = append([]string{a.Namespace}, cells...)
		}
		if wide {
			inPod := "-" // no netdev moved: one dash, not one per NIC
			if slices.ContainsFunc(a.NICs, func(n NIC) bool { return n.PodNetdev != "" }) {
				inPod = strings.Join(podNetdevs, ",")
			}
			cells = append(cells, strings.Join(numas, ","), inPod, strings.Join(a.Resources, ","), a.Status, strings.Join(a.Claims, ","), dashed(a.Health))
		}
		row(tw, cells...)
	}
	if len(items) == 0 {
		fmt.Fprintln(tw, "(no pod requests a kube-rdma resource or holds a kube-rdma DRA claim)")
	}
	return tw.Flush()
}

func dashed(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func numaString(n int) string {
	if n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
