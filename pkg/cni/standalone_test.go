package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netns"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
	"github.com/kube-rdma/kube-rdma/pkg/kubelet/podresources/podrestest"
)

const podArgs = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"

// TestStandalone: chained after the primary network, the plugin asks the
// kubelet for the pod's devices and attaches all of them.
func TestStandalone(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 3, false, "shared")
	srv := podrestest.Start(t,
		podrestest.Pod{Namespace: "ns", Name: "p", Devices: map[string][]string{"rdma/hca": {pciAddr(2), "mlx5_0"}, "nvidia.com/gpu": {"GPU-0"}}},
		podrestest.Pod{Namespace: "ns", Name: "none", Devices: map[string][]string{"nvidia.com/gpu": {"GPU-1"}}})
	e.socket = srv.Socket
	prev := `"prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"SANDBOX"}],"ips":[{"address":"10.0.0.5/24","interface":0}]}`
	for _, noGet := range []bool{false, true} {
		srv.NoGet.Store(noGet)
		t.Run(fmt.Sprintf("noGet=%v", noGet), func(t *testing.T) {
			pod := netnstest.New(t)
			before := e.snapshot(pod)
			conf := e.conf("1.0.0", `"resourceName":"rdma/hca",`+e.ipam("10.12.0.0/24")+`,`+prev)
			a := args("c1", pod, "eth0", conf)
			a.Args = podArgs + ";K8S_POD_UID=uid-1"
			res := mustAdd(t, e, a)
			var names []string
			for _, i := range res.Interfaces {
				names = append(names, i.Name)
			}
			if diff := cmp.Diff([]string{"eth0", "net1", "net2"}, names); diff != "" {
				t.Errorf("result interfaces (-want +got):\n%s", diff)
			}
			var ips []string
			for _, ip := range res.IPs {
				subnet := "10.0.0.0/24"
				if ip.Address.IP.To4()[1] == 12 {
					subnet = "10.12.0.0/24"
				}
				ips = append(ips, fmt.Sprintf("%s@%d", subnet, *ip.Interface))
			}
			if diff := cmp.Diff([]string{"10.0.0.0/24@0", "10.12.0.0/24@1", "10.12.0.0/24@2"}, ips); diff != "" {
				t.Errorf("result ips (-want +got):\n%s", diff)
			}
			// mlx5_0 sorts first, so it is net1; mlx5_2 is net2.
			rec, _ := attachment.Store{Dir: e.stateDir}.Load(attachment.Key{ContainerID: "c1", IfName: "eth0"})
			var got []string
			for _, d := range rec.Devices {
				got = append(got, d.RDMA+"="+d.PodIfName)
			}
			if diff := cmp.Diff([]string{"mlx5_0=net1", "mlx5_2=net2"}, got); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			// The daemon's node state joins records to pods by this.
			if diff := cmp.Diff(&attachment.PodRef{Namespace: "ns", Name: "p", UID: "uid-1"}, rec.Pod); diff != "" {
				t.Errorf("record's pod (-want +got):\n%s", diff)
			}
			if err := e.p.Check(context.Background(), a); err != nil {
				t.Errorf("CHECK: %v", err)
			}
			if err := e.p.Del(context.Background(), a); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
				t.Errorf("after DEL (-before +after):\n%s", diff)
			}
		})
	}

	t.Run("no allocation passes prevResult through", func(t *testing.T) {
		pod := netnstest.New(t)
		before := e.snapshot(pod)
		a := args("c2", pod, "eth0", e.conf("1.0.0", `"resourceName":"rdma/hca",`+prev))
		a.Args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=none"
		res := mustAdd(t, e, a)
		if len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || len(res.IPs) != 1 {
			t.Errorf("result = %+v, want prevResult", res)
		}
		if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
			t.Errorf("host changed (-before +after):\n%s", diff)
		}
		if err := e.p.Del(context.Background(), a); err != nil {
			t.Errorf("DEL: %v", err)
		}
	})

	t.Run("deviceID not allocated to the pod is refused", func(t *testing.T) {
		pod := netnstest.New(t)
		before := e.snapshot(pod)
		a := args("c3", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`))
		a.Args = podArgs
		_, err := e.p.Add(context.Background(), a)
		if !errors.Is(err, ErrNotAllocated) || cniCode(err) != CodeNotAllocated {
			t.Errorf("ADD error = %v, want ErrNotAllocated", err)
		}
		if diff := cmp.Diff(before, e.snapshot(pod)); diff != "" {
			t.Errorf("host changed (-before +after):\n%s", diff)
		}
		// The allocated one, named by its PCI address, is accepted.
		a = args("c3", pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+pciAddr(2)+`"}`))
		a.Args = podArgs
		mustAdd(t, e, a)
		if err := e.p.Del(context.Background(), a); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConcurrentAddDel runs 50 ADD/DEL pairs at once over 8 devices: no
// device is ever in two pods, and nothing is left behind.
func TestConcurrentAddDel(t *testing.T) {
	const devices, pods = 8, 50
	e := newEnv(t, devices, false, "exclusive")
	e.conf("1.1.0", "") // sets the plugin's Node before the goroutines read it
	before := e.snapshot()
	var mu sync.Mutex
	holder := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	var added, busy int
	for i := range pods {
		pod := netnstest.New(t)
		wg.Go(func() {
			id := fmt.Sprintf("c%d", i)
			dev := fmt.Sprintf("mlx5_%d", i%devices)
			a := args(id, pod, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"`+dev+`"}`))
			_, err := e.p.Add(context.Background(), a)
			if errors.Is(err, ErrDeviceInUse) {
				mu.Lock()
				busy++
				mu.Unlock()
				return // another pod holds it: the claim worked
			}
			if err != nil {
				errs <- fmt.Errorf("ADD %s: %w", id, err)
				return
			}
			mu.Lock()
			if h, ok := holder[dev]; ok {
				errs <- fmt.Errorf("%s given to %s while %s holds it", dev, id, h)
			}
			holder[dev] = id
			added++
			mu.Unlock()
			if got := netnstest.Links(t, pod); len(got) != 1 || got[0].Name != "net1" {
				errs <- fmt.Errorf("%s: pod links %v", id, got)
			}
			mu.Lock()
			delete(holder, dev)
			mu.Unlock()
			if err := e.p.Del(context.Background(), a); err != nil {
				errs <- fmt.Errorf("DEL %s: %w", id, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d attached, %d refused as in use", added, busy)
	if added < devices {
		t.Errorf("only %d ADDs succeeded, want at least %d", added, devices)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Errorf("after all DELs (-before +after):\n%s", diff)
	}
}

// TestGC returns the devices of attachments that are no longer valid.
func TestGC(t *testing.T) {
	e := newEnv(t, 2, false, "exclusive")
	before := e.snapshot()
	podA, podB := netnstest.New(t), netnstest.New(t)
	mustAdd(t, e, args("a", podA, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_0"}`)))
	mustAdd(t, e, args("b", podB, "net1", e.conf("1.1.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)))
	valid, _ := json.Marshal([]types.GCAttachment{{ContainerID: "a", IfName: "net1"}})
	if err := e.p.GC(context.Background(), args("", nil, "", e.conf("1.1.0", `"cni.dev/valid-attachments":`+string(valid)))); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := netnstest.Links(t, podB); len(got) != 0 {
		t.Errorf("pod b still has %v", got)
	}
	if got := netnstest.Links(t, podA); len(got) != 1 {
		t.Errorf("pod a lost its device: %v", got)
	}
	if diff := cmp.Diff([]string{"a_net1.json"}, e.snapshot().Records); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	// Pod a's netns dies before GC: the kernel returns its netdev, GC
	// renames it back.
	kernelReturns(t, e, podA, "net1", "net1")
	if err := e.p.GC(context.Background(), args("", nil, "", e.conf("1.1.0", `"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if diff := cmp.Diff(before, e.snapshot()); diff != "" {
		t.Errorf("after GC of all (-before +after):\n%s", diff)
	}
}

func TestStatus(t *testing.T) {
	e := newEnv(t, 0, false, "shared")
	ctx := context.Background()
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", ""))); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", `"resourceName":"rdma/hca"`))); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS without kubelet = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", `"requirePodResources":true`))); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS without kubelet, requirePodResources = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
	srv := podrestest.Start(t)
	e.socket = srv.Socket
	srv.GetDisabled.Store(true) // the probe pod is unknown either way: the kubelet answered
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", `"resourceName":"rdma/hca"`))); err != nil {
		t.Errorf("STATUS with kubelet: %v", err)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := e.stateDir
	e.stateDir = filepath.Join(notDir, "state")
	stdin := e.conf("1.1.0", "")
	e.stateDir = stateDir
	if err := e.p.Status(ctx, args("", nil, "", stdin)); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with an unusable state dir = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
	e.rdma.fail = func(m string, _ netns.NsHandle) error {
		if m == "NetnsMode" {
			return errInjected
		}
		return nil
	}
	if err := e.p.Status(ctx, args("", nil, "", e.conf("1.1.0", ""))); cniCode(err) != types.ErrPluginNotAvailable {
		t.Errorf("STATUS without rdma netlink = %v, want code %d", err, types.ErrPluginNotAvailable)
	}
}

// TestGCThisNetworkOnly: GC leaves other networks' attachments alone and
// releases the IPAM of those it collects.
func TestGCThisNetworkOnly(t *testing.T) {
	requireHostLocal(t)
	e := newEnv(t, 2, false, "shared")
	podA, podB := netnstest.New(t), netnstest.New(t)
	mine := e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_0"},`+e.ipam("10.60.0.0/24"))
	other := []byte(strings.Replace(string(e.conf("1.0.0", `"runtimeConfig":{"deviceID":"mlx5_1"}`)), `"name":"rdma"`, `"name":"other"`, 1))
	mustAdd(t, e, args("a", podA, "net1", mine))
	mustAdd(t, e, args("b", podB, "net1", other))
	defer func() { _ = e.p.Del(context.Background(), args("b", podB, "net1", other)) }()
	lease := filepath.Join(e.stateDir, "..", "ipam", "rdma", "10.60.0.2")
	if _, err := os.Stat(lease); err != nil {
		t.Fatalf("lease: %v", err)
	}
	if err := e.p.GC(context.Background(), args("", nil, "", e.conf("1.1.0", `"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if got := netnstest.Links(t, podA); len(got) != 0 {
		t.Errorf("pod a still has %v", got)
	}
	if _, err := os.Stat(lease); !os.IsNotExist(err) {
		t.Errorf("lease %s still there after GC (%v)", lease, err)
	}
	if got := netnstest.Links(t, podB); len(got) != 1 {
		t.Errorf("pod b of network other lost its device: %v", got)
	}
}
