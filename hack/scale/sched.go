package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/kube-rdma/kube-rdma/pkg/dra"
)

// Sched is one DRA scheduling run: pods each with a claim for a GPU and a
// NIC, created at a fixed rate.
type Sched struct {
	Claim     string  `json:"claim"`
	Pods      int     `json:"pods"`
	Scheduled int     `json:"scheduled"`
	RatePerS  float64 `json:"createdPerS"`
	PerS      float64 `json:"scheduledPerS"`
	P50S      float64 `json:"p50S"`
	P99S      float64 `json:"p99S"`
	// Aligned is the share of allocated claims whose NIC sits under the
	// GPU's PCIe switch.
	Aligned float64 `json:"alignedShare"`
	// Fallback is the share of allocated claims of a prioritized list that
	// got a later choice than its first (the prioritized run only).
	Fallback *float64 `json:"fallbackShare,omitempty"`
}

// The claims of the scheduling runs: one GPU and one NIC each.
const (
	// claimAligned: matchAttribute on pcieRoot.
	claimAligned = "aligned"
	// claimUnaligned: no constraint.
	claimUnaligned = "unaligned"
	// claimPrioritized: a prioritized list (firstAvailable): a NIC under
	// the GPU's PCIe switch (matchAttribute kube-rdma.io/pcieSwitch), else
	// any NIC.
	claimPrioritized = "prioritized"
)

const schedNS = "sched"

func claimTemplate(name string) *resourceapi.ResourceClaimTemplate {
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "sim-gpu"}},
		{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "rdma-nic"}},
	}}}
	switch name {
	case claimAligned:
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributePCIeRoot))}}
	case claimPrioritized:
		sub := func(n string) resourceapi.DeviceSubRequest {
			return resourceapi.DeviceSubRequest{Name: n, DeviceClassName: "rdma-nic", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
		}
		spec.Devices.Requests[1] = resourceapi.DeviceRequest{Name: "nic", FirstAvailable: []resourceapi.DeviceSubRequest{sub("switch"), sub("any")}}
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic/switch"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(dra.AttrPCIeSwitch))}}
	}
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: schedNS, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec}}
}

func schedPod(name, tmpl string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: schedNS, Name: name, Labels: map[string]string{"run": tmpl}},
		Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false),
			ResourceClaims: []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To(tmpl)}},
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/train:2026.11",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "dev"}},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}},
	}
}

// schedule creates pods pods at rate per second asking for the template
// tmpl's claim, and times each from its create call to the scheduler's
// binding (the first watch event with a node name).
func (c *cluster) schedule(ctx context.Context, tmpl string, pods int, rate float64) (Sched, error) {
	out := Sched{Claim: tmpl, Pods: pods, RatePerS: rate}
	if _, err := c.kube.ResourceV1().ResourceClaimTemplates(schedNS).Create(ctx, claimTemplate(tmpl), metav1.CreateOptions{}); err != nil {
		return out, fmt.Errorf("create claim template: %w", err)
	}
	w, err := c.kube.CoreV1().Pods(schedNS).Watch(ctx, metav1.ListOptions{LabelSelector: "run=" + tmpl})
	if err != nil {
		return out, fmt.Errorf("watch pods: %w", err)
	}
	defer w.Stop()
	var mu sync.Mutex
	created := map[string]time.Time{}
	bound := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type == watch.Deleted || p.Spec.NodeName == "" {
				continue
			}
			mu.Lock()
			if _, seen := bound[p.Name]; !seen {
				bound[p.Name] = time.Now()
			}
			n := len(bound)
			mu.Unlock()
			if n == pods {
				return
			}
		}
	}()
	gap := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range pods {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		name := fmt.Sprintf("%s-%d", tmpl, i)
		mu.Lock()
		created[name] = time.Now()
		mu.Unlock()
		if _, err := c.kube.CoreV1().Pods(schedNS).Create(ctx, schedPod(name, tmpl), metav1.CreateOptions{}); err != nil {
			return out, fmt.Errorf("create pod %s: %w", name, err)
		}
	}
	select {
	case <-done:
	case <-time.After(2*time.Minute + time.Duration(float64(pods)/rate*float64(time.Second))):
		slog.Warn("not every pod was scheduled", "claim", tmpl)
	case <-ctx.Done():
		return out, ctx.Err()
	}
	mu.Lock()
	var lat []float64
	var last time.Time
	for name, t := range bound {
		lat = append(lat, t.Sub(created[name]).Seconds())
		if t.After(last) {
			last = t
		}
	}
	mu.Unlock()
	out.Scheduled = len(lat)
	if len(lat) > 0 {
		out.PerS = float64(len(lat)) / last.Sub(start).Seconds()
	}
	out.P50S, out.P99S = quantile(lat, 0.5), quantile(lat, 0.99)
	share, fallback, err := c.alignedShare(ctx, tmpl)
	out.Aligned = share
	if tmpl == claimPrioritized {
		out.Fallback = &fallback
	}
	return out, err
}

// alignedShare is the share of the allocated claims of template tmpl whose
// NIC is under the same PCIe switch as their GPU, and the share whose NIC
// came from a later subrequest than the first (nic/any).
func (c *cluster) alignedShare(ctx context.Context, tmpl string) (float64, float64, error) {
	pools := map[string]*topo{}
	for _, n := range c.nodes {
		pools[n.name] = n.topo
		pools[dra.PoolName(n.name, draPool)] = n.topo
	}
	claims, err := c.kube.ResourceV1().ResourceClaims(schedNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("list claims: %w", err)
	}
	alloc, aligned, fallback := 0, 0, 0
	for _, cl := range claims.Items {
		if cl.Status.Allocation == nil || !ownedBy(cl, tmpl) {
			continue
		}
		sw := map[string]string{}
		for _, r := range cl.Status.Allocation.Devices.Results {
			req, sub, _ := strings.Cut(r.Request, "/")
			if sub == "any" {
				fallback++
			}
			if t := pools[r.Pool]; t != nil {
				sw[req] = t.switchOf[r.Device]
			}
		}
		alloc++
		if sw["gpu"] != "" && sw["gpu"] == sw["nic"] {
			aligned++
		}
	}
	if alloc == 0 {
		return 0, 0, nil
	}
	return float64(aligned) / float64(alloc), float64(fallback) / float64(alloc), nil
}

// ownedBy: the claim was made for a pod of template tmpl (the pods are
// named after it).
func ownedBy(cl resourceapi.ResourceClaim, tmpl string) bool {
	for _, o := range cl.OwnerReferences {
		if o.Kind == "Pod" && len(o.Name) > len(tmpl) && o.Name[:len(tmpl)+1] == tmpl+"-" {
			return true
		}
	}
	return false
}
