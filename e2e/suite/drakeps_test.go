package suite

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/devicemetadata"
)

// checkMetadata: the container of pod read the device metadata file of its pod claim
// podClaim's request (podScript lists the files), at the path the metadata API gives a
// claim made from a template, and the file names dev: our driver, its name, RDMA device and
// pool. It returns the request's name in the file (with a prioritized list, the subrequest
// the scheduler chose: "nic/switch") and the file's device.
func (e *env) checkMetadata(t *testing.T, ns, pod, podClaim, request string, dev resourceapi.Device) (string, metadata.Device) {
	t.Helper()
	l := e.waitLog(t, ns, pod, 1)
	path := metadata.ResourceClaimTemplateFilePath(draDriver, podClaim, request)
	content, ok := l.metadata[path]
	if !ok {
		t.Fatalf("pod %s: no metadata file %s; the files it has: %v", pod, path, slices.Sorted(maps.Keys(l.metadata)))
	}
	var dm metadata.DeviceMetadata
	if err := devicemetadata.DecodeMetadataFromStream(json.NewDecoder(strings.NewReader(content)), &dm); err != nil {
		t.Fatalf("pod %s: metadata file %s: %v\n%s", pod, path, err, content)
	}
	if len(dm.Requests) != 1 || len(dm.Requests[0].Devices) != 1 {
		t.Fatalf("pod %s: metadata file %s: requests %+v, want one with one device", pod, path, dm.Requests)
	}
	r, got := dm.Requests[0], dm.Requests[0].Devices[0]
	attr := func(name string) string {
		if v := got.Attributes[resourceapi.QualifiedName(name)].StringValue; v != nil {
			return *v
		}
		return ""
	}
	if base, _, _ := strings.Cut(r.Name, "/"); base != request || got.Driver != draDriver || got.Name != dev.Name ||
		attr(attrRDMA) != attrString(dev, attrRDMA) || attr(attrPool) != attrString(dev, attrPool) {
		t.Errorf("pod %s: metadata file %s: request %s, device %s/%s (%s %q, %s %q), want request %s, %s/%s (%q, %q)", pod, path, r.Name,
			got.Driver, got.Name, attrRDMA, attr(attrRDMA), attrPool, attr(attrPool), request, draDriver, dev.Name, attrString(dev, attrRDMA), attrString(dev, attrPool))
	}
	return r.Name, got
}

// prioritizedClaim asks for the GPU at bus and one NIC of nicClass: under the GPU's PCIe
// switch if there is one free, else under its host bridge, else any (docs/dra.md,
// "Prioritized list").
func prioritizedClaim(gpuClass, nicClass, bus string) resourceapi.DeviceClaim {
	sw, root := resourceapi.FullyQualifiedName(attrSwitch), resourceapi.FullyQualifiedName(attrRoot)
	sub := func(name string) resourceapi.DeviceSubRequest {
		return resourceapi.DeviceSubRequest{Name: name, DeviceClassName: nicClass, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	}
	return resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			request("gpu", gpuClass, fmt.Sprintf(`device.attributes["resource.kubernetes.io"].pciBusID == %q`, bus)),
			{Name: "nic", FirstAvailable: []resourceapi.DeviceSubRequest{sub("switch"), sub("root"), sub("any")}},
		},
		Constraints: []resourceapi.DeviceConstraint{
			{Requests: []string{"gpu", "nic/switch"}, MatchAttribute: &sw},
			{Requests: []string{"gpu", "nic/root"}, MatchAttribute: &root},
		},
	}
}

// testDRAPrioritized: a claim from the prioritized list above gets a NIC under the GPU's
// switch (subrequest nic/switch) for a GPU and a dra pool with a NIC there, and falls back
// (nic/root or nic/any, a NIC not under the GPU's switch) for a GPU and a pool without one;
// the pod's metadata file names the subrequest and the NIC it got.
func testDRAPrioritized(t *testing.T, e *env) {
	c := e.needDRA(t)
	if c.gpuDriver == "" {
		t.Fatal("the DRA phase names no GPU driver")
	}
	gpus, err := e.draDevices(t.Context(), c.gpuDriver)
	if err != nil {
		t.Fatal(err)
	}
	nics, err := e.draDevices(t.Context(), draDriver)
	if err != nil {
		t.Fatal(err)
	}
	// One GPU and pool with a NIC under the GPU's switch, one without.
	type pair struct {
		gpu  resourceapi.Device
		pool string
	}
	var aligned, fallback *pair
	for _, gpu := range gpus {
		for _, pool := range slices.Sorted(maps.Keys(c.pools)) {
			if c.pools[pool] == 0 {
				continue
			}
			peer := slices.ContainsFunc(nics, func(n resourceapi.Device) bool {
				return attrString(n, attrPool) == pool && attrString(n, attrSwitch) == attrString(gpu, attrSwitch)
			})
			switch {
			case peer && aligned == nil:
				aligned = &pair{gpu, pool}
			case !peer && fallback == nil:
				fallback = &pair{gpu, pool}
			}
		}
	}
	if aligned == nil || fallback == nil {
		t.Fatalf("GPUs %d, dra pools %v: want a GPU and pool with a NIC under the GPU's switch and one without", len(gpus), c.pools)
	}
	ns := e.namespace(t)
	var report []string
	for i, p := range []pair{*aligned, *fallback} {
		bus, gpuSwitch := attrString(p.gpu, attrBusID), attrString(p.gpu, attrSwitch)
		tmpl, name := fmt.Sprintf("prioritized-%d", i), fmt.Sprintf("prioritized-%d", i)
		e.createTemplate(t, ns, tmpl, prioritizedClaim(c.gpuClass, draClass(p.pool), bus))
		e.createPod(t, e.claimPod(ns, name, tmpl))
		e.waitRunning(t, ns, name)
		claim := e.podClaim(t, ns, name)
		var sub string
		var nic resourceapi.Device
		for req, r := range allocated(t, claim) {
			if strings.HasPrefix(req, "nic/") {
				sub = req
				if nic, err = e.draDevice(t.Context(), draDriver, r.Device); err != nil {
					t.Fatal(err)
				}
			}
		}
		underSwitch := attrString(nic, attrSwitch) == gpuSwitch
		switch {
		case i == 0 && (sub != "nic/switch" || !underSwitch):
			t.Errorf("claim %s (GPU %s, pool %s with a NIC under its switch %s): got %s, NIC %s under %q; want nic/switch, a NIC under the GPU's switch",
				claim.Name, bus, p.pool, gpuSwitch, sub, nic.Name, attrString(nic, attrSwitch))
		case i == 1 && (sub == "nic/switch" || sub == "" || underSwitch):
			t.Errorf("claim %s (GPU %s, pool %s with no NIC under its switch %s): got %q, NIC %s under %q; want the fallback",
				claim.Name, bus, p.pool, gpuSwitch, sub, nic.Name, attrString(nic, attrSwitch))
		}
		if inFile, _ := e.checkMetadata(t, ns, name, "devices", "nic", nic); inFile != sub {
			t.Errorf("pod %s: metadata file names request %s, the allocation %s", name, inFile, sub)
		}
		report = append(report, fmt.Sprintf("GPU %s + pool %s -> %s (%s)", bus, p.pool, sub, attrString(nic, attrRDMA)))
		e.deletePod(t, ns, name)
		e.waitClaimGone(t, ns, claim.Name)
	}
	line := "dra: prioritized list (NIC under the GPU's switch, else its host bridge, else any): " + strings.Join(report, "; ")
	t.Log(line)
	e.appendReport(t, line)
}
