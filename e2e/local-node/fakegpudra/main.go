// Command fakegpudra is the local-node e2e's stand-in for a GPU DRA driver (NVIDIA's
// k8s-dra-driver-gpu on a real node): it publishes the fixture node's GPUs (nodesim.LocalNode's
// H100s, read from the fixture's sysfs and procfs like any GPU of a real node) in a
// ResourceSlice of the driver gpu.e2e.kube-rdma.io, with the attributes a claim aligns a GPU
// and a NIC on, computed as kube-rdma's DRA driver computes them for NICs:
//
//	resource.kubernetes.io/pcieRoot   the GPU's host bridge (discovery's PCIeRoot)
//	resource.kubernetes.io/pciBusID   its PCI address (deviceattribute.GetPCIBusIDAttribute)
//	kube-rdma.io/pcieSwitch           dra.PCIeSwitch of its PCI path
//	gpu.e2e.kube-rdma.io/uuid         its UUID
//
// It prepares claims through the kubeletplugin helper, so the kubelet runs pods with GPU
// claims: a container gets E2E_GPU_<bus ID as a name>=<bus ID> per GPU, from a CDI spec
// written at start (the fixture has no GPU driver, so there is nothing else to give).
//
//	fakegpudra -kubeconfig FILE -node NAME -sysfs-root DIR -proc-root DIR -cdi-dir DIR \
//	  -plugin-dir DIR -registry-dir DIR
//
// It is e2e tooling (built by e2e/local-node/up.sh, started by hook.sh start fakegpudra for the
// suite's DRA phase); no shipped binary links it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/containeredits"
	"github.com/kube-rdma/kube-rdma/pkg/discovery"
	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

const (
	driverName = "gpu.e2e.kube-rdma.io"
	cdiKind    = driverName + "/gpu"
)

type config struct {
	kubeconfig, node, sys, proc, cdiDir, pluginDir, registryDir string
}

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	flag.StringVar(&c.node, "node", "", "the node's name")
	flag.StringVar(&c.sys, "sysfs-root", "/sys", "sysfs root of the node's GPUs")
	flag.StringVar(&c.proc, "proc-root", "/proc", "procfs root (/proc/driver/nvidia/gpus)")
	flag.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "where the GPUs' CDI spec goes")
	flag.StringVar(&c.pluginDir, "plugin-dir", filepath.Join(kubeletplugin.KubeletPluginsDir, driverName), "the driver's kubelet plugin directory")
	flag.StringVar(&c.registryDir, "registry-dir", kubeletplugin.KubeletRegistryDir, "the kubelet's plugin registration directory")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		log.Fatalf("fakegpudra: %v", err)
	}
}

func run(ctx context.Context, c config) error {
	if c.kubeconfig == "" || c.node == "" {
		return errors.New("-kubeconfig and -node are required")
	}
	gpus, _, err := discovery.Scanner{SysRoot: c.sys, ProcRoot: c.proc}.GPUs()
	if err != nil {
		return fmt.Errorf("scan gpus: %w", err)
	}
	devs, spec, err := publish(gpus)
	if err != nil {
		return err
	}
	specPath := filepath.Join(c.cdiDir, "e2e-fakegpudra.json")
	if err := containeredits.WriteSpec(specPath, spec); err != nil {
		return err
	}
	defer func() { _ = containeredits.RemoveSpec(specPath) }()
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kube client: %w", err)
	}
	if err := os.MkdirAll(c.pluginDir, 0o750); err != nil {
		return fmt.Errorf("create plugin dir: %w", err)
	}
	h, err := kubeletplugin.Start(ctx, plugin{},
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(c.node),
		kubeletplugin.KubeClient(client),
		kubeletplugin.PluginDataDirectoryPath(c.pluginDir),
		kubeletplugin.RegistrarDirectoryPath(c.registryDir),
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer h.Stop()
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		c.node: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}
	if err := h.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish resource slices: %w", err)
	}
	for _, d := range devs {
		log.Printf("published GPU %s: %v", d.Name, attrString(d.Attributes))
	}
	<-ctx.Done()
	return nil
}

// publish returns the GPUs as DRA devices and the CDI spec with one device of the same name
// each.
func publish(gpus []discovery.GPU) ([]resourceapi.Device, cdispec.Spec, error) {
	spec := cdispec.Spec{Kind: cdiKind}
	var devs []resourceapi.Device
	for _, g := range gpus {
		bus, err := deviceattribute.GetPCIBusIDAttribute(g.PCIAddress)
		if err != nil {
			return nil, spec, fmt.Errorf("gpu %s: %w", g.PCIAddress, err)
		}
		a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{bus.Name: bus.Value}
		str := func(name resourceapi.QualifiedName, v string) {
			if v != "" {
				a[name] = resourceapi.DeviceAttribute{StringValue: &v}
			}
		}
		str(deviceattribute.StandardDeviceAttributePCIeRoot, g.PCIeRoot)
		str(dra.AttrPCIeSwitch, dra.PCIeSwitch(g.Location()))
		str(driverName+"/uuid", g.UUID)
		name := "gpu-" + dnsLabel(g.PCIAddress)
		devs = append(devs, resourceapi.Device{Name: name, Attributes: a})
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{
			Env: []string{EnvName(g.PCIAddress) + "=" + g.PCIAddress},
		}})
	}
	if len(devs) == 0 {
		return nil, spec, errors.New("no GPU in the node's sysfs")
	}
	return devs, spec, nil
}

// EnvName is the variable a container with the GPU at PCI address addr gets:
// E2E_GPU_0000_19_00_0.
func EnvName(addr string) string {
	return "E2E_GPU_" + strings.NewReplacer(":", "_", ".", "_").Replace(addr)
}

func dnsLabel(s string) string { return strings.NewReplacer(":", "-", ".", "-").Replace(s) }

func attrString(a map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) string {
	var out []string
	for k, v := range a {
		if v.StringValue != nil {
			out = append(out, fmt.Sprintf("%s=%s", k, *v.StringValue))
		}
	}
	return strings.Join(out, " ")
}

// plugin prepares GPU claims: each allocated GPU is its CDI device.
type plugin struct{}

func (plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		res := kubeletplugin.PrepareResult{Devices: []kubeletplugin.Device{}}
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				if r.Driver != driverName {
					continue
				}
				res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool,
					DeviceName: r.Device, CDIDeviceIDs: []string{cdiKind + "=" + r.Device}})
			}
		}
		log.Printf("prepared claim %s/%s: %d GPUs", c.Namespace, c.Name, len(res.Devices))
		out[c.UID] = res
	}
	return out, nil
}

func (plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (plugin) HandleError(_ context.Context, err error, msg string) {
	log.Printf("%s: %v", msg, err)
}

func (plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
