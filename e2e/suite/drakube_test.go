package suite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

const (
	draDriver    = "rdma.kube-rdma.io"
	attrPool     = "kube-rdma.io/pool"
	attrRDMA     = "kube-rdma.io/rdmaDevice"
	attrSwitch   = "kube-rdma.io/pcieSwitch"
	attrRoot     = "resource.kubernetes.io/pcieRoot"
	attrBusID    = "resource.kubernetes.io/pciBusID"
	attrGIDIndex = "kube-rdma.io/rocev2GIDIndex"
	taintPort    = "kube-rdma.io/port-down"
)

// draConfig is what the DRA phase expects (phases_test.go sets it).
type draConfig struct {
	// pools: the pools with frontend dra and how many devices each publishes.
	pools map[string]int
	// alignPool: a dra pool with a NIC under each GPU's host bridge and switch, and another
	// NIC elsewhere; the alignment and taint tests use it.
	alignPool string
	// latencyPool: the dra pool of the start latency test, compared with the device plugin's
	// first exclusive pool; also the extended resource test's.
	latencyPool string
	latencyPods int // pods of each kind in the start latency test
	// gpuDriver: a GPU DRA driver whose devices have pciBusID, pcieRoot and
	// kube-rdma.io/pcieSwitch; gpuClass: a DeviceClass of its GPUs.
	gpuDriver, gpuClass string
	// portDevice: RDMA device of alignPool the taint test takes down (port 1); best the one
	// an unconstrained claim would get first.
	portDevice string
	// sharedPool: a shared dra pool of one NIC published for sharedSlots claims at once
	// (DRA consumable capacity): testDRASharedNIC's.
	sharedPool  string
	sharedSlots int
	// sharedSubnet: the CNI plugin is chained to the claims with sharedNetdev macvlan, each
	// sharer gets net1 with an address of this prefix ("192.168.78."); "": no CNI.
	sharedSubnet string
}

// needDRA returns the DRA phase's configuration and waits until the node publishes every
// dra pool; it skips t outside the DRA phase.
func (e *env) needDRA(t *testing.T) draConfig {
	t.Helper()
	if e.dra == nil {
		t.Fatal("not the DRA phase: no dra pools")
	}
	c := *e.dra
	err := eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		devs, err := e.draDevices(ctx, draDriver)
		if err != nil {
			return err
		}
		got := map[string]int{}
		for _, d := range devs {
			got[attrString(d, attrPool)]++
		}
		if !maps.Equal(got, c.pools) {
			return fmt.Errorf("node %s publishes %v devices by pool, want %v", e.node, got, c.pools)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// draClass is the chart's DeviceClass of a dra pool.
func draClass(pool string) string {
	return strings.ReplaceAll(strings.ToLower(pool), "_", "-") + "." + draDriver
}

// draDevices lists the devices the driver publishes for the node, in slice order.
func (e *env) draDevices(ctx context.Context, driver string) ([]resourceapi.Device, error) {
	list, err := e.draAPI.ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fields.AndSelectors(
		fields.OneTermEqualSelector("spec.nodeName", e.node), fields.OneTermEqualSelector("spec.driver", driver)).String()})
	if err != nil {
		return nil, fmt.Errorf("list resource slices of %s: %w", driver, err)
	}
	var out []resourceapi.Device
	for _, s := range list.Items {
		out = append(out, s.Spec.Devices...)
	}
	return out, nil
}

// draDevice returns the published device named name.
func (e *env) draDevice(ctx context.Context, driver, name string) (resourceapi.Device, error) {
	devs, err := e.draDevices(ctx, driver)
	if err != nil {
		return resourceapi.Device{}, err
	}
	for _, d := range devs {
		if d.Name == name {
			return d, nil
		}
	}
	return resourceapi.Device{}, fmt.Errorf("driver %s publishes no device %s on node %s", driver, name, e.node)
}

func attrString(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func attrInt(d resourceapi.Device, name resourceapi.QualifiedName) (int64, bool) {
	if a, ok := d.Attributes[name]; ok && a.IntValue != nil {
		return *a.IntValue, true
	}
	return 0, false
}

// request is one request of exactly one device of class, with CEL selectors.
func request(name, class string, cel ...string) resourceapi.DeviceRequest {
	r := resourceapi.DeviceRequest{Name: name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	for _, x := range cel {
		r.Exactly.Selectors = append(r.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: x}})
	}
	return r
}

// createTemplate creates a ResourceClaimTemplate of these requests (and constraints).
func (e *env) createTemplate(t *testing.T, ns, name string, spec resourceapi.DeviceClaim) {
	t.Helper()
	_, err := e.draAPI.ResourceClaimTemplates(ns).Create(t.Context(), &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create resource claim template %s: %v", name, err)
	}
}

// claimPod is a device pod (podScript) whose container uses a claim made from template.
func (e *env) claimPod(ns, name, template string) *corev1.Pod {
	p := e.devicePod(ns, name, "", 0)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &template}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "devices"}}
	return p
}

// podClaim returns the allocated claim of the pod (made from its template, or for its
// extended resources), waiting for it.
func (e *env) podClaim(t *testing.T, ns, pod string) *resourceapi.ResourceClaim {
	t.Helper()
	claim, err := e.podClaimOf(t.Context(), ns, pod)
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

// podClaimOf is podClaim returning the error.
func (e *env) podClaimOf(ctx context.Context, ns, pod string) (*resourceapi.ResourceClaim, error) {
	var claim *resourceapi.ResourceClaim
	err := eventually(ctx, time.Minute, func(ctx context.Context) error {
		p, err := e.core.Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var name string
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
		if x := p.Status.ExtendedResourceClaimStatus; name == "" && x != nil {
			name = x.ResourceClaimName
		}
		if name == "" {
			return fmt.Errorf("pod %s names no claim in its status yet", pod)
		}
		if claim, err = e.draAPI.ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			return err
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s of pod %s is not allocated", name, pod)
		}
		for _, r := range claim.Status.ReservedFor {
			if r.Name == pod && r.UID == p.UID {
				return nil
			}
		}
		return fmt.Errorf("claim %s is not reserved for pod %s: %v", name, pod, claim.Status.ReservedFor)
	})
	return claim, err
}

// allocated maps each request of the claim to the device it got (one per request).
func allocated(t *testing.T, c *resourceapi.ResourceClaim) map[string]resourceapi.DeviceRequestAllocationResult {
	t.Helper()
	out := map[string]resourceapi.DeviceRequestAllocationResult{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if _, dup := out[r.Request]; dup {
			t.Fatalf("claim %s: request %s got more than one device: %+v", c.Name, r.Request, c.Status.Allocation.Devices.Results)
		}
		out[r.Request] = r
	}
	return out
}

// checkNICContainer checks what the container of pod got for the one NIC dev of our driver
// (nicProblems) and returns the pod's environment.
func (e *env) checkNICContainer(t *testing.T, ns, pod string, dev resourceapi.Device) map[string]string {
	t.Helper()
	l := e.waitLog(t, ns, pod, 1)
	for _, s := range e.nicProblems(l, dev) {
		t.Errorf("pod %s: %s", pod, s)
	}
	t.Logf("pod %s: device %s (%s), /dev/infiniband %v", pod, dev.Name, attrString(dev, attrRDMA), l.ticks[0].dev)
	return l.env
}

// nicProblems: what a container that logged l lacks of the one NIC dev of our driver: its
// device nodes (one uverbs, nothing else of ours) and NCCL_IB_HCA (and, for RoCE,
// NCCL_IB_GID_INDEX) naming it when its pool sets NCCL's variables (ncclPools), none when
// it does not.
func (e *env) nicProblems(l podLog, dev resourceapi.Device) []string {
	rdma := attrString(dev, attrRDMA)
	problems := deviceProblems(l.ticks[0].dev, 1)
	if pool := attrString(dev, attrPool); !e.nccl(pool) {
		for _, k := range []string{"NCCL_IB_HCA", "NCCL_IB_GID_INDEX"} {
			if v, set := l.env[k]; set {
				problems = append(problems, fmt.Sprintf("%s=%q, want it unset: pool %s has nccl: false (device %s)", k, v, pool, dev.Name))
			}
		}
	} else {
		if got := l.env["NCCL_IB_HCA"]; got != "="+rdma {
			problems = append(problems, fmt.Sprintf("NCCL_IB_HCA=%q, want %q (device %s)", got, "="+rdma, dev.Name))
		}
		if gid, ok := attrInt(dev, attrGIDIndex); ok && l.env["NCCL_IB_GID_INDEX"] != strconv.FormatInt(gid, 10) {
			problems = append(problems, fmt.Sprintf("NCCL_IB_GID_INDEX=%q, want %d", l.env["NCCL_IB_GID_INDEX"], gid))
		}
	}
	return problems
}

// waitClaimGone waits until the claim is deleted (a template's claim goes with its pod).
func (e *env) waitClaimGone(t *testing.T, ns, name string) {
	t.Helper()
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		_, err := e.draAPI.ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("claim %s still there (%v)", name, err)
	})
	if err != nil {
		t.Error(err)
	}
}

// waitTaint waits until the published device has the port-down taint (want) or none.
func (e *env) waitTaint(t *testing.T, name string, want bool) resourceapi.Device {
	t.Helper()
	var d resourceapi.Device
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		var err error
		if d, err = e.draDevice(ctx, draDriver, name); err != nil {
			return err
		}
		tainted := slices.ContainsFunc(d.Taints, func(x resourceapi.DeviceTaint) bool {
			return x.Key == taintPort && x.Effect == resourceapi.DeviceTaintEffectNoSchedule
		})
		if tainted != want {
			return fmt.Errorf("device %s taints %+v, want %s: %v", name, d.Taints, taintPort, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitClaimNetwork waits until the claim's status.devices has our driver's entry of device r,
// written by the daemon (pkg/claimstatus), with the pod's interface ifName, an address that
// begins with ipPrefix (CIDR notation: "10.78.0.66/" for one address) and a Ready condition
// true, and returns it. A share's entry (r.ShareID) must carry its shareID.
func (e *env) waitClaimNetwork(t *testing.T, ns, claim string, r resourceapi.DeviceRequestAllocationResult, ifName, ipPrefix string) resourceapi.AllocatedDeviceStatus {
	t.Helper()
	var got resourceapi.AllocatedDeviceStatus
	err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		c, err := e.draAPI.ResourceClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		i := slices.IndexFunc(c.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == draDriver && d.Pool == r.Pool && d.Device == r.Device && shareID(d.ShareID) == shareID(r.ShareID)
		})
		if i < 0 {
			return fmt.Errorf("claim %s: status.devices %+v has no entry of %s/%s", claim, c.Status.Devices, r.Pool, r.Device)
		}
		got = c.Status.Devices[i]
		n := got.NetworkData
		if n == nil || n.InterfaceName != ifName || n.HardwareAddress == "" ||
			!slices.ContainsFunc(n.IPs, func(s string) bool { return strings.HasPrefix(s, ipPrefix) }) {
			return fmt.Errorf("claim %s: networkData %+v, want interface %s, an address %s.., a MAC", claim, n, ifName, ipPrefix)
		}
		if !slices.ContainsFunc(got.Conditions, func(c metav1.Condition) bool {
			return c.Type == "Ready" && c.Status == metav1.ConditionTrue
		}) {
			return fmt.Errorf("claim %s: conditions %+v, want Ready true", claim, got.Conditions)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// shareID is a result's or a status entry's shareID, "" for none.
func shareID[T ~string](id *T) string {
	if id == nil {
		return ""
	}
	return string(*id)
}
