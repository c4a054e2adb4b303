package suite

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testDRAClaimTemplate: for each dra pool, a pod whose claim template asks for one NIC of the
// pool's DeviceClass runs; the claim made for it is allocated one device of the pool and
// reserved for the pod; the container gets that device's nodes and NCCL_IB_HCA, and reads
// the claim's device metadata file naming the device; the claim goes with the pod.
func testDRAClaimTemplate(t *testing.T, e *env) {
	c := e.needDRA(t)
	ns := e.namespace(t)
	for _, pool := range slices.Sorted(maps.Keys(c.pools)) {
		t.Run(pool, func(t *testing.T) {
			if c.pools[pool] == 0 {
				t.Skipf("pool %s publishes no device", pool)
			}
			tmpl, name := "one-nic-"+dnsName(pool), "claim-"+dnsName(pool)
			e.createTemplate(t, ns, tmpl, resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(pool))}})
			e.createPod(t, e.claimPod(ns, name, tmpl))
			e.waitRunning(t, ns, name)
			claim := e.podClaim(t, ns, name)
			r := allocated(t, claim)["nic"]
			if len(claim.Status.Allocation.Devices.Results) != 1 || r.Driver != draDriver {
				t.Fatalf("claim %s: results %+v, want one device of %s", claim.Name, claim.Status.Allocation.Devices.Results, draDriver)
			}
			dev, err := e.draDevice(t.Context(), draDriver, r.Device)
			if err != nil {
				t.Fatal(err)
			}
			if got := attrString(dev, attrPool); got != pool {
				t.Errorf("claim %s got device %s of pool %q, want %q", claim.Name, dev.Name, got, pool)
			}
			e.checkNICContainer(t, ns, name, dev)
			_, m := e.checkMetadata(t, ns, name, "devices", "nic", dev)
			line := fmt.Sprintf("dra: pod %s read its claim's metadata file: %s of pool %s", name, dev.Name, pool)
			for _, k := range []string{attrRDMA, "kube-rdma.io/port", "kube-rdma.io/uverbs", "kube-rdma.io/closestGPUs", "kube-rdma.io/closestGPULevel"} {
				a := m.Attributes[resourceapi.QualifiedName(k)]
				switch {
				case a.StringValue != nil:
					line += fmt.Sprintf(", %s=%s", k, *a.StringValue)
				case a.IntValue != nil:
					line += fmt.Sprintf(", %s=%d", k, *a.IntValue)
				}
			}
			t.Log(line)
			e.appendReport(t, line)
			e.deletePod(t, ns, name)
			e.waitClaimGone(t, ns, claim.Name)
		})
	}
}

// testDRAAlignPCIeRoot: a claim for one specific GPU (by a CEL selector on its pciBusID) and
// a NIC of the DRA phase's alignPool with matchAttribute resource.kubernetes.io/pcieRoot gets the
// NIC under the GPU's host bridge, for each GPU in turn, while a NIC under another bridge
// is free.
func testDRAAlignPCIeRoot(t *testing.T, e *env) { testDRAAlign(t, e, attrRoot) }

// testDRAAlignPCIeSwitch: the same with kube-rdma.io/pcieSwitch on both sides gives the NIC
// under the GPU's switch; and a GPU with no device of another dra pool under its switch
// cannot be paired with one: the pod stays unschedulable.
func testDRAAlignPCIeSwitch(t *testing.T, e *env) { testDRAAlign(t, e, attrSwitch) }

func testDRAAlign(t *testing.T, e *env, attr resourceapi.QualifiedName) {
	c := e.needDRA(t)
	if c.gpuDriver == "" || c.alignPool == "" {
		t.Fatal("the DRA phase names no GPU driver or align pool")
	}
	gpuDriver := c.gpuDriver
	gpus, err := e.draDevices(t.Context(), gpuDriver)
	if err != nil {
		t.Fatal(err)
	}
	nics, err := e.draDevices(t.Context(), draDriver)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) < 2 {
		t.Fatalf("driver %s publishes %d GPUs on node %s, want 2 or more", gpuDriver, len(gpus), e.node)
	}
	ns := e.namespace(t)
	var report []string
	for i, gpu := range gpus {
		bus, want := attrString(gpu, attrBusID), attrString(gpu, attr)
		if bus == "" || want == "" {
			t.Fatalf("GPU %s: %s %q, %s %q: want both", gpu.Name, attrBusID, bus, attr, want)
		}
		// The check can fail: some NIC of the pool is under another bridge or switch.
		var same, other []string
		for _, n := range nics {
			if attrString(n, attrPool) != c.alignPool {
				continue
			}
			if attrString(n, attr) == want {
				same = append(same, n.Name)
			} else {
				other = append(other, n.Name)
			}
		}
		if len(same) == 0 || len(other) == 0 {
			t.Fatalf("GPU %s (%s %s): pool %s has NICs %v with it and %v without; want some of both", gpu.Name, attr, want, c.alignPool, same, other)
		}
		tmpl, name := fmt.Sprintf("gpu%d-nic", i), fmt.Sprintf("aligned-%d", i)
		e.createTemplate(t, ns, tmpl, alignedClaim(c.gpuClass, draClass(c.alignPool), bus, attr))
		e.createPod(t, e.claimPod(ns, name, tmpl))
		e.waitRunning(t, ns, name)
		claim := e.podClaim(t, ns, name)
		got := allocated(t, claim)
		if got["gpu"].Device != gpu.Name {
			t.Errorf("claim %s: GPU %s, want %s (selected by pciBusID %s)", claim.Name, got["gpu"].Device, gpu.Name, bus)
		}
		nic, err := e.draDevice(t.Context(), draDriver, got["nic"].Device)
		if err != nil {
			t.Fatal(err)
		}
		if v := attrString(nic, attr); v != want || !slices.Contains(same, nic.Name) {
			t.Errorf("claim %s: GPU %s (%s %s) got NIC %s (%s %q), want one of %v", claim.Name, gpu.Name, attr, want, nic.Name, attr, v, same)
		}
		env := e.checkNICContainer(t, ns, name, nic)
		if v := env[gpuEnv(bus)]; v != bus {
			t.Errorf("pod %s: %s=%q, want %q (the GPU's CDI device)", name, gpuEnv(bus), v, bus)
		}
		report = append(report, fmt.Sprintf("%s->%s", bus, attrString(nic, attrRDMA)))
		e.deletePod(t, ns, name)
		e.waitClaimGone(t, ns, claim.Name) // its GPU and NIC are free for the next claim
	}
	line := fmt.Sprintf("dra: a GPU and a NIC with matchAttribute %s got the NIC under the GPU's %s: %s",
		attr, map[resourceapi.QualifiedName]string{attrRoot: "host bridge", attrSwitch: "switch"}[attr], strings.Join(report, ", "))
	if attr == attrSwitch {
		line += e.checkNoSwitchPeer(t, ns, c, gpus, nics)
	}
	t.Log(line)
	e.appendReport(t, line)
}

// alignedClaim asks for the GPU at bus and a NIC of nicClass that agree on attr.
func alignedClaim(gpuClass, nicClass, bus string, attr resourceapi.QualifiedName) resourceapi.DeviceClaim {
	match := resourceapi.FullyQualifiedName(attr)
	return resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			request("gpu", gpuClass, fmt.Sprintf(`device.attributes["resource.kubernetes.io"].pciBusID == %q`, bus)),
			request("nic", nicClass),
		},
		Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"}, MatchAttribute: &match}},
	}
}

// checkNoSwitchPeer: a GPU and a NIC of a dra pool none of whose devices is under that GPU's
// switch, with matchAttribute on the switch, is unschedulable (and stays so). It returns a
// note for the report ("" when no such pair exists here).
func (e *env) checkNoSwitchPeer(t *testing.T, ns string, c draConfig, gpus, nics []resourceapi.Device) string {
	t.Helper()
	for _, gpu := range gpus {
		sw := attrString(gpu, attrSwitch)
		for _, pool := range slices.Sorted(maps.Keys(c.pools)) {
			if c.pools[pool] == 0 || slices.ContainsFunc(nics, func(n resourceapi.Device) bool {
				return attrString(n, attrPool) == pool && attrString(n, attrSwitch) == sw
			}) {
				continue
			}
			bus := attrString(gpu, attrBusID)
			e.createTemplate(t, ns, "no-peer", alignedClaim(c.gpuClass, draClass(pool), bus, attrSwitch))
			e.createPod(t, e.claimPod(ns, "no-peer", "no-peer"))
			err := eventually(t.Context(), time.Minute, func(ctx context.Context) error {
				pod, err := e.core.Pods(ns).Get(ctx, "no-peer", metav1.GetOptions{})
				if err != nil {
					return err
				}
				return unschedulable(pod, "")
			})
			if err == nil {
				err = e.staysPending(t.Context(), ns, "no-peer", 10*time.Second)
			}
			if err != nil {
				t.Errorf("GPU %s and a NIC of pool %s (none under its switch %s): %v", gpu.Name, pool, sw, err)
			}
			e.deletePod(t, ns, "no-peer")
			return fmt.Sprintf("; GPU %s with a NIC of pool %s (none under its switch) unschedulable", bus, pool)
		}
	}
	return ""
}

// staysPending fails when the pod gets a node within d.
func (e *env) staysPending(ctx context.Context, ns, name string, d time.Duration) error {
	return consistently(ctx, d, func(ctx context.Context) error {
		pod, err := e.core.Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodPending || pod.Spec.NodeName != "" {
			return fmt.Errorf("pod %s: phase %s on node %q, want Pending on none", name, pod.Status.Phase, pod.Spec.NodeName)
		}
		return nil
	})
}

// gpuEnv is the variable fakegpudra's CDI device of the GPU at bus sets (E2E_GPU_0000_19_00_0).
func gpuEnv(bus string) string {
	return "E2E_GPU_" + strings.NewReplacer(":", "_", ".", "_").Replace(bus)
}

// testDRAPortDownTaint: port 1 of the DRA phase's portDevice going down taints its device in the
// ResourceSlice (kube-rdma.io/port-down, NoSchedule); a claim for exactly that device is then
// unschedulable, and a new claim for any NIC of the pool gets another one. The port back up
// removes the taint, and the waiting claim gets its device.
func testDRAPortDownTaint(t *testing.T, e *env) {
	c := e.needDRA(t)
	if c.portDevice == "" || c.alignPool == "" {
		t.Fatal("the DRA phase names no port device or align pool")
	}
	devs, err := e.draDevices(t.Context(), draDriver)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(devs, func(d resourceapi.Device) bool { return attrString(d, attrRDMA) == c.portDevice })
	if i < 0 || attrString(devs[i], attrPool) != c.alignPool {
		t.Fatalf("port device %s is not published in pool %s", c.portDevice, c.alignPool)
	}
	target := devs[i].Name
	e.waitTaint(t, target, false)
	restored := e.portUpOnCleanup(t, c.portDevice, nil)
	e.mustHook(t, 30*time.Second, "port-state", c.portDevice, "1", "down")
	start := time.Now()
	d := e.waitTaint(t, target, true)
	tainted := time.Since(start).Round(time.Millisecond)
	if s := attrString(d, "kube-rdma.io/portState"); s == "ACTIVE" {
		t.Errorf("device %s tainted with portState %s", target, s)
	}
	ns := e.namespace(t)
	// Exactly the tainted device: unschedulable while the taint is there.
	e.createTemplate(t, ns, "pinned", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		request("nic", draClass(c.alignPool), fmt.Sprintf(`device.attributes["kube-rdma.io"].rdmaDevice == %q`, c.portDevice))}})
	e.createPod(t, e.claimPod(ns, "pinned", "pinned"))
	err = eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		pod, err := e.core.Pods(ns).Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return unschedulable(pod, "")
	})
	if err == nil {
		err = e.staysPending(t.Context(), ns, "pinned", 5*time.Second)
	}
	if err != nil {
		t.Fatalf("a claim for the tainted device %s: %v", target, err)
	}
	// Any NIC of the pool: another device.
	e.createTemplate(t, ns, "any", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(c.alignPool))}})
	e.createPod(t, e.claimPod(ns, "any", "any"))
	e.waitRunning(t, ns, "any")
	got := allocated(t, e.podClaim(t, ns, "any"))["nic"].Device
	if got == target {
		t.Errorf("a new claim got the tainted device %s", target)
	}
	// Port up: no taint, and the pinned claim gets its device.
	e.mustHook(t, 30*time.Second, "port-state", c.portDevice, "1", "up")
	restored()
	start = time.Now()
	e.waitTaint(t, target, false)
	untainted := time.Since(start).Round(time.Millisecond)
	e.waitRunning(t, ns, "pinned")
	if d := allocated(t, e.podClaim(t, ns, "pinned"))["nic"].Device; d != target {
		t.Errorf("the pinned claim got %s, want %s", d, target)
	}
	line := fmt.Sprintf("dra: port 1 of %s down: device %s tainted %s after %s, a claim for it unschedulable, a new claim got %s; port up: taint gone after %s, the waiting claim got it",
		c.portDevice, target, taintPort, tainted, got, untainted)
	t.Log(line)
	e.appendReport(t, line)
}

// testDRAExtendedResource: a pod with resources.limits {<prefix>/<pool>: 1} of a dra pool
// (no device plugin advertises it) runs through the DeviceClass's extendedResourceName: the
// scheduler makes a claim for it (the pod's status names it), allocated one device of the
// pool, and the container gets that device.
func testDRAExtendedResource(t *testing.T, e *env) {
	c := e.needDRA(t)
	if c.latencyPool == "" {
		t.Fatal("the DRA phase names no latency pool")
	}
	res := e.resource(c.latencyPool)
	class, err := e.draAPI.DeviceClasses().Get(t.Context(), draClass(c.latencyPool), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if class.Spec.ExtendedResourceName == nil || *class.Spec.ExtendedResourceName != string(res) {
		t.Fatalf("DeviceClass %s: extendedResourceName %v, want %s (dropped without the DRAExtendedResource gate)", class.Name, class.Spec.ExtendedResourceName, res)
	}
	ns := e.namespace(t)
	pod := e.devicePod(ns, "extended", "", 0)
	pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{res: *resource.NewQuantity(1, resource.DecimalSI)}
	e.createPod(t, pod)
	p := e.waitRunning(t, ns, "extended")
	if p.Status.ExtendedResourceClaimStatus == nil {
		t.Fatalf("pod extended: no extendedResourceClaimStatus")
	}
	claim := e.podClaim(t, ns, "extended")
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 1 || results[0].Driver != draDriver {
		t.Fatalf("claim %s: results %+v, want one device of %s", claim.Name, results, draDriver)
	}
	dev, err := e.draDevice(t.Context(), draDriver, results[0].Device)
	if err != nil {
		t.Fatal(err)
	}
	if attrString(dev, attrPool) != c.latencyPool {
		t.Errorf("claim %s got device %s of pool %q, want %s", claim.Name, dev.Name, attrString(dev, attrPool), c.latencyPool)
	}
	e.checkNICContainer(t, ns, "extended", dev)
	line := fmt.Sprintf("dra: a pod with limits %s: 1 ran with claim %s (made by the scheduler from DeviceClass %s), device %s (%s)",
		res, claim.Name, class.Name, dev.Name, attrString(dev, attrRDMA))
	t.Log(line)
	e.appendReport(t, line)
	e.deletePod(t, ns, "extended")
	e.waitClaimGone(t, ns, claim.Name)
}

// testDRAStartLatency: latencyPods pods with a one-NIC claim template of
// latencyPool, and as many with one device of the device plugin's first exclusive
// pool, each set created at once on the same node: their start latencies, creation to
// Ready, go to the report with the ratio of medians.
func testDRAStartLatency(t *testing.T, e *env) {
	c := e.needDRA(t)
	if c.latencyPool == "" {
		t.Fatal("the DRA phase names no latency pool")
	}
	dp := e.devicePool(t)
	n := min(c.latencyPods, c.pools[c.latencyPool], int(dp.count))
	if n < c.latencyPods {
		t.Logf("latencyPods %d, but pools %s and %s have %d and %d devices: %d pods", c.latencyPods,
			c.latencyPool, dp.name, c.pools[c.latencyPool], dp.count, n)
	}
	if err := e.waitAllocatable(t.Context(), time.Minute, e.counts()); err != nil {
		t.Fatal(err)
	}
	dpNS := e.namespace(t)
	dpNames := podNames("dp", n)
	dpLat := e.startParallel(t, dpNS, dp.name, dpNames)
	e.deleteParallel(t, dpNS, dpNames)
	draNS := e.namespace(t)
	e.createTemplate(t, draNS, "one-nic", resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{request("nic", draClass(c.latencyPool))}})
	var pods []*corev1.Pod
	for _, name := range podNames("dra", n) {
		pods = append(pods, e.claimPod(draNS, name, "one-nic"))
	}
	draLat := e.startPods(t, draNS, pods)
	ratio := 0.0
	if median(dpLat) > 0 {
		ratio = float64(median(draLat)) / float64(median(dpLat))
	}
	line := fmt.Sprintf("pod start latency, %d pods at once, creation to Ready: with a DRA claim (template, one NIC of %s) median %s, worst %s; "+
		"with the device plugin (one device of %s, same node and run) median %s, worst %s; ratio of medians %.2f",
		n, c.latencyPool, median(draLat), worst(draLat), dp.name, median(dpLat), worst(dpLat), ratio)
	t.Log(line)
	e.appendReport(t, line)
	e.deleteParallel(t, draNS, podNames("dra", n))
}

func TestDRAClass(t *testing.T) {
	if got := draClass("Roce_Shared"); got != "roce-shared.rdma.kube-rdma.io" {
		t.Errorf("draClass = %q", got)
	}
}
