package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/devinfo"
)

// The multus phase: Multus's thick plugin (e2e/local-node/multus: v4.2.2 built from the module
// proxy, imaged by images.sh) in front of the node's network, installed before the chart and
// uninstalled after it; the chart in multus mode with one NetworkAttachmentDefinition for the
// exclusive vf pool. Multus finds the pod's device of the NAD's resourceName through the
// kubelet's PodResources API and passes it to kube-rdma as deviceID.

const (
	multusRelease = "multus-e2e"
	multusNetwork = "rdma-vf"        // the chart's NAD (cni.networks)
	multusPinned  = "rdma-vf-pinned" // the refusal test's NAD, with a deviceID of its own
	multusConf    = "00-multus.conf" // what the Multus daemon writes in the CNI config dir
	networksKey   = "k8s.v1.cni.cncf.io/networks"
	netStatusKey  = "k8s.v1.cni.cncf.io/network-status"
	resourceKey   = "k8s.v1.cni.cncf.io/resourceName"
	multusTimeout = 3 * time.Minute
)

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

func (l localNodeDesc) multusPhase() phase {
	v, devicePluginCfg := l.devicePluginValues()
	v = maps.Clone(v)
	delete(v, "nri") // the fail-closed checks of NRI concern the chained pool; here none
	v["cni"] = values{
		"install":      true,
		"mode":         "multus",
		"pluginConfig": v["cni"].(values)["pluginConfig"],
		"networks": []values{{"name": multusNetwork, "pool": "vf", "ipam": values{"type": "host-local",
			"ranges": [][]values{{{"subnet": "192.168.78.0/24"}}}, "dataDir": l.rdmaIPAM}}},
	}
	p := phase{
		name: "multus",
		config: func(c *config) {
			devicePluginCfg(c)
			c.chainedPool = ""
		},
		setup:    l.installMultus,
		releases: []release{{name: "kube-rdma", values: []values{l.nodeValues(), v}}},
		tests: []namedTest{
			{"PodThroughMultus", l.testMultusPod},
		},
	}
	if l.multusChart == "" || l.multusImage == "" {
		p.skip = "hook describe names no multus-chart and multus-image (e2e/local-node/images.sh builds the image)"
	}
	return p
}

// installMultus installs the Multus chart and waits for the daemon's 00-multus.conf (before
// the node-state snapshot, which lists every CNI config: the chart's uninstall must leave it);
// at the phase's end it uninstalls it and checks that Multus took its config with it, and
// removes what its installer copied into the CNI bin dir (multus-shim, passthru: no
// uninstaller of upstream's removes them) and the daemon's socket directory /run/multus.
func (l localNodeDesc) installMultus(t *testing.T, e *env) {
	start := time.Now()
	_, err := e.runHelm(t.Context(), "install", multusRelease, l.multusChart, "--create-namespace", "--wait", "--timeout", "180s",
		"--set", "image="+l.multusImage, "--set", "nodeRun="+l.nodeRun, "--set", "apiPort="+strconv.Itoa(l.apiPort))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(l.nodeRun, "cni/net.d", multusConf)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), multusTimeout)
		defer cancel()
		if _, err := e.runHelm(ctx, "uninstall", multusRelease, "--wait", "--timeout", "120s"); err != nil {
			t.Error(err)
		}
		err := eventually(ctx, 30*time.Second, func(context.Context) error {
			if _, err := os.Stat(conf); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s still there after the Multus daemon stopped (%v)", conf, err)
			}
			return nil
		})
		if err != nil {
			t.Error(err)
			_ = os.Remove(conf)
		}
		for _, b := range []string{"multus-shim", "passthru"} {
			if err := os.Remove(filepath.Join(l.nodeRun, "cni/bin", b)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Error(err)
			}
		}
		// The daemon's socket directory on the host.
		if err := os.RemoveAll("/run/multus"); err != nil {
			t.Error(err)
		}
	})
	err = eventually(t.Context(), time.Minute, func(context.Context) error {
		b, err := os.ReadFile(conf)
		if err != nil {
			return err
		}
		var c struct {
			Type           string `json:"type"`
			ClusterNetwork string `json:"clusterNetwork"`
		}
		if err := json.Unmarshal(b, &c); err != nil || c.Type != "multus-shim" || filepath.Base(c.ClusterNetwork) != "10-e2e.conflist" {
			return fmt.Errorf("%s: %s (%v), want type multus-shim delegating to 10-e2e.conflist", conf, b, err)
		}
		return nil
	})
	if err != nil {
		l.dumpMultus(t, e)
		t.Fatalf("the Multus daemon's config: %v", err)
	}
	t.Logf("Multus installed, %s written, %.1f s after helm install", multusConf, time.Since(start).Seconds())
}

// dumpMultus prints the Multus daemon's pods: status, events, log.
func (l localNodeDesc) dumpMultus(t *testing.T, e *env) {
	pods, err := e.core.Pods(e.helm.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + multusRelease})
	if err != nil {
		t.Logf("list the Multus pods: %v", err)
		return
	}
	for _, p := range pods.Items {
		e.dumpPod(t, p.Namespace, p.Name)
	}
}

// networkStatus is one entry of Multus's network-status annotation, what this test reads.
type networkStatus struct {
	Name       string        `json:"name"`
	Interface  string        `json:"interface"`
	DeviceInfo *devinfo.Info `json:"device-info"`
}

// testMultusPod: a pod that names the chart's NAD and asks for one device of its pool gets the
// device through Multus: device nodes, environment, the netdev as net1 (Multus's name), the
// host losing that link while the pod runs; Multus's network-status names the interface and
// carries the device-info the daemon wrote (its PCI address), and the file is on the host.
// Then the refusal: a second NAD pins the first pod's device as its deviceID (no resourceName:
// Multus passes the NAD's own deviceID); a pod that holds another device of the pool and names
// that NAD is refused by kube-rdma (the kubelet's PodResources says the device is not the
// pod's), and the sandbox failure says so in an Event.
func (l localNodeDesc) testMultusPod(t *testing.T, e *env) {
	p := e.pool("vf")
	if p == nil || p.count < 2 {
		t.Fatalf("pool vf: %+v, want 2+ devices", p)
	}
	t.Cleanup(func() {
		if t.Failed() {
			l.dumpMultus(t, e)
		}
	})
	// The pod's start counts from a node that advertises the pool (not the scheduler's wait).
	if err := e.waitAllocatable(t.Context(), time.Minute, map[string]int64{"vf": p.count}); err != nil {
		t.Fatal(err)
	}
	ns := e.namespace(t)
	before, err := e.hookLines(t.Context(), "links")
	if err != nil {
		t.Fatal(err)
	}
	pod := e.devicePod(ns, "multus-vf", "vf", 1)
	pod.Annotations = map[string]string{networksKey: e.helm.namespace + "/" + multusNetwork}
	start := time.Now()
	e.createPod(t, pod)
	running := e.waitRunning(t, ns, pod.Name)
	took := time.Since(start)
	l.reportStart(t, e, running, took)
	lg := e.waitLog(t, ns, pod.Name, 1)
	problems := deviceProblems(lg.ticks[0].dev, 1)
	problems = append(problems, envProblems(lg.env, "vf", 1, e.nccl("vf"))...)
	problems = append(problems, netdevProblems(lg.ticks[0].links, 1)...)
	during, err := e.hookLines(t.Context(), "links")
	if err != nil {
		t.Fatal(err)
	}
	if lost := minus(before, during); len(lost) != 1 {
		problems = append(problems, fmt.Sprintf("the host lost links %v while the pod runs, want 1", lost))
	}
	rdmaDev := lg.env["KUBE_RDMA_VF_RDMA_DEVICES"]
	pci := lg.env["KUBE_RDMA_VF_PCI_ADDRESSES"]
	problems = append(problems, multusStatusProblems(running, e.helm.namespace+"/"+multusNetwork, pci)...)
	// The device-info file of the pod's device, as the device plugin wrote it at Allocate.
	info, err := devinfo.Load(devinfo.DefaultDPDir, string(e.resource("vf")), pci)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("device-info file of %s: %v", pci, err))
	case info.Type != devinfo.TypePCI || info.PCI == nil || info.PCI.PCIAddress != pci || info.PCI.RDMADevice != rdmaDev:
		problems = append(problems, fmt.Sprintf("device-info file of %s: %+v %+v, want pci %s rdma-device %s", pci, info, info.PCI, pci, rdmaDev))
	default:
		t.Logf("device-info %s: pci-address %s, rdma-device %s, pf-pci-address %s", devinfo.FileName(string(e.resource("vf")), pci),
			info.PCI.PCIAddress, info.PCI.RDMADevice, info.PCI.PFPCIAddress)
	}
	for _, s := range problems {
		t.Error(s)
	}
	t.Run("RefusesDeviceNotAllocated", func(t *testing.T) { l.testMultusRefusal(t, e, ns, pci) })
	e.deletePod(t, ns, pod.Name)
	err = eventually(t.Context(), time.Minute, func(ctx context.Context) error {
		after, err := e.hookLines(ctx, "links")
		if err != nil {
			return err
		}
		if lost := minus(before, after); len(lost) > 0 {
			return fmt.Errorf("host links after the pod: missing %v", lost)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// reportStart logs and reports the Multus pod's start: the wall time from create to Running
// and Ready, and the API's own (Ready's transition minus the creation, whole seconds).
func (l localNodeDesc) reportStart(t *testing.T, e *env, p *corev1.Pod, took time.Duration) {
	api := "?"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			api = fmt.Sprintf("%.0f", c.LastTransitionTime.Sub(p.CreationTimestamp.Time).Seconds())
		}
	}
	line := fmt.Sprintf("multus: pod with the vf NAD (Multus thick v4.2.2 -> kube-rdma, deviceID from PodResources) Running and Ready %.1f s after create (API: %s s)",
		took.Seconds(), api)
	t.Log(line)
	e.appendReport(t, line)
}

// multusStatusProblems checks Multus's network-status: the NAD's entry names net1 and carries
// the device-info of the pod's device.
func multusStatusProblems(p *corev1.Pod, network, pci string) []string {
	raw := p.Annotations[netStatusKey]
	var st []networkStatus
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return []string{fmt.Sprintf("network-status %q: %v", raw, err)}
	}
	for _, s := range st {
		if s.Name != network {
			continue
		}
		var problems []string
		if s.Interface != "net1" {
			problems = append(problems, fmt.Sprintf("network-status of %s: interface %q, want net1", network, s.Interface))
		}
		if s.DeviceInfo == nil || s.DeviceInfo.Type != devinfo.TypePCI || s.DeviceInfo.PCI == nil || s.DeviceInfo.PCI.PCIAddress != pci {
			problems = append(problems, fmt.Sprintf("network-status of %s: device-info %+v, want pci-address %s (%s)", network, s.DeviceInfo, pci, raw))
		}
		return problems
	}
	return []string{fmt.Sprintf("network-status has no entry %s: %s", network, raw)}
}

// testMultusRefusal: see testMultusPod. held is the device another pod holds.
func (l localNodeDesc) testMultusRefusal(t *testing.T, e *env, ns, held string) {
	nad, err := e.dynamic.Resource(nadGVR).Namespace(e.helm.namespace).Get(t.Context(), multusNetwork, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's NAD: %v", err)
	}
	if nad.GetAnnotations()[resourceKey] != string(e.resource("vf")) {
		t.Errorf("the chart's NAD %s: annotation %s=%q, want %s", multusNetwork, resourceKey, nad.GetAnnotations()[resourceKey], e.resource("vf"))
	}
	raw, _, _ := unstructured.NestedString(nad.Object, "spec", "config")
	var conf map[string]any
	if err := json.Unmarshal([]byte(raw), &conf); err != nil {
		t.Fatalf("the chart's NAD config %q: %v", raw, err)
	}
	conf["name"], conf["deviceID"] = multusPinned, held
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	pinned := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": multusPinned, "namespace": ns},
		"spec":     map[string]any{"config": string(b)},
	}}
	if _, err := e.dynamic.Resource(nadGVR).Namespace(ns).Create(t.Context(), pinned, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create NAD %s: %v", multusPinned, err)
	}
	t.Cleanup(func() {
		err := e.dynamic.Resource(nadGVR).Namespace(ns).Delete(context.Background(), multusPinned, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	pod := e.devicePod(ns, "multus-pinned", "vf", 1)
	pod.Annotations = map[string]string{networksKey: multusPinned}
	e.createPod(t, pod)
	var msg string
	err = eventually(t.Context(), 2*time.Minute, func(ctx context.Context) error {
		p, err := e.core.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodRunning {
			return fmt.Errorf("pod %s runs with a deviceID it does not hold", pod.Name)
		}
		ev, err := e.core.Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, v := range ev.Items {
			if v.InvolvedObject.Name == pod.Name && v.Type == corev1.EventTypeWarning && v.Reason == "FailedCreatePodSandBox" {
				msg = v.Message
				if strings.Contains(msg, "device not allocated to this pod") && strings.Contains(msg, held) {
					return nil
				}
			}
		}
		return fmt.Errorf("no FailedCreatePodSandBox Event with kube-rdma's refusal of %s (last: %q)", held, msg)
	})
	if err != nil {
		e.dumpPod(t, ns, pod.Name)
		t.Fatal(err)
	}
	if p, err := e.core.Pods(ns).Get(t.Context(), pod.Name, metav1.GetOptions{}); err == nil && p.Status.Phase == corev1.PodRunning {
		t.Errorf("pod %s Running after the refusal", pod.Name)
	}
	i := strings.Index(msg, "device not allocated to this pod")
	t.Logf("refused loudly: Warning FailedCreatePodSandBox: %.160s ... %.300s", msg, msg[i:])
	e.deletePod(t, ns, pod.Name)
}
