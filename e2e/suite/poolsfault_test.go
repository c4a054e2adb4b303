package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const quarantinedPoolsFiles = `kube_rdma_device_plugin_quarantined_files{kind="pools"}`

// testFaultTornPoolsFile (phase faults): the node's pools file (<alloc-dir>/_pools.json, the
// served pools' devices, which the CNI plugin checks a Multus deviceID against) cut in half.
// No pod of the phase names a deviceID, so the test is the runtime: it runs the installed
// plugin binary as a runtime runs it for a Multus secondary network (CNI_ARGS naming a
// running pod of the ib pool, runtimeConfig.deviceID the RDMA device the kubelet allocated to
// that pod, a netns of its own), then DEL as a runtime does after a failed ADD. The first ADD
// moves the file to <alloc-dir>/_quarantine/ and is refused, code 50, naming the file; the
// daemon writes the file again within its files interval (10 s); the next ADD moves the
// device's netdev into the netns and its DEL gives it back. Then fault.check.
func testFaultTornPoolsFile(t *testing.T, e *env) {
	c := e.needFaults(t)
	if c.poolsFile == "" || c.cniBin == "" {
		t.Skip("the phase names no pools file or no installed CNI plugin")
	}
	const pool = "ib"
	f := e.beginFault(t, "torn node pools file", pool)
	w := f.watched[0]
	devs := e.waitLog(t, w.ns, w.name, 1).env["KUBE_RDMA_"+envName(pool)+"_RDMA_DEVICES"]
	if devs == "" || strings.Contains(devs, ",") {
		t.Fatalf("pod %s: KUBE_RDMA_%s_RDMA_DEVICES=%q, want one device", w.name, envName(pool), devs)
	}
	netns := "e2e-deviceid"
	if out, err := exec.Command("ip", "netns", "add", netns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", netns, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", netns).Run() })
	rt := cniRuntime{bin: c.cniBin, netns: "/var/run/netns/" + netns, ifName: "rdma0",
		args: fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", w.ns, w.name),
		// As the chart's NetworkAttachmentDefinition for the phase's values would have it (its
		// pluginConfig: rdmaNetnsMode shared, this kernel has no RDMA netlink to ask).
		conf: fmt.Sprintf(`{"cniVersion":"1.0.0","name":"e2e-deviceid","type":"kube-rdma","rdmaNetnsMode":"shared","runtimeConfig":{"deviceID":%q}}`, devs)}

	orig, err := os.ReadFile(c.poolsFile)
	if err != nil {
		t.Fatalf("the node's pools file: %v", err)
	}
	cut := orig[:len(orig)/2]
	if err := os.WriteFile(c.poolsFile, cut, 0o644); err != nil {
		t.Fatal(err)
	}
	tornAt := time.Now()
	out, code, err := rt.run(t.Context(), "ADD", "e2e-deviceid-1")
	if err == nil {
		t.Errorf("ADD with a torn pools file succeeded: %s", out)
	} else if code != 50 || !strings.Contains(out, "_pools.json") {
		t.Errorf("ADD with a torn pools file: %v, code %d, %s; want code 50 naming the file", err, code, out)
	}
	if out, _, err := rt.run(t.Context(), "DEL", "e2e-deviceid-1"); err != nil {
		t.Errorf("DEL after the refused ADD: %v: %s", err, out)
	}
	moved, err := waitQuarantined(t.Context(), filepath.Join(filepath.Dir(c.poolsFile), "_quarantine", "_pools.json.*"), cut)
	if err != nil {
		t.Fatal(err)
	}
	movedIn := time.Since(tornAt)
	if err := waitWrittenAgain(t.Context(), c.poolsFile, orig); err != nil {
		t.Error(err)
	}
	restoredIn := time.Since(tornAt)
	gauge, err := e.waitGauge(t.Context(), quarantinedPoolsFiles)
	if err != nil {
		t.Error(err)
	}
	removeQuarantined(t, moved)
	out, _, err = rt.run(t.Context(), "ADD", "e2e-deviceid-2")
	if err != nil {
		t.Fatalf("ADD once the pools file is back: %v: %s", err, out)
	}
	if out, err := exec.Command("ip", "-n", netns, "link", "show", "rdma0").CombinedOutput(); err != nil {
		t.Errorf("the device's netdev is not rdma0 in the netns after ADD: %v: %s", err, out)
	}
	if out, _, err := rt.run(t.Context(), "DEL", "e2e-deviceid-2"); err != nil {
		t.Errorf("DEL: %v: %s", err, out)
	}
	f.healed = tornAt
	res := f.check(t)
	f.report(t, fmt.Sprintf("the node's pools file cut in half: a Multus-style ADD (deviceID %s of a running pod of %s, the installed plugin run as a runtime runs it) refused with 50 naming the file, the file moved to _quarantine/ %.1f s after the tear, written again by the daemon %.1f s after it, %s = %v; the next ADD moved the netdev, its DEL gave it back",
		devs, pool, movedIn.Seconds(), restoredIn.Seconds(), quarantinedPoolsFiles, gauge), res)
}

// cniRuntime runs a CNI plugin binary as a container runtime does: the CNI_* environment, the
// netconf on stdin, the result or error on stdout.
type cniRuntime struct {
	bin, netns, ifName, args, conf string
}

// run runs command for containerID and returns stdout, the CNI error code of a failure (0
// when the output is not a CNI error) and the exec error.
func (r cniRuntime) run(ctx context.Context, command, containerID string) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.bin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=" + r.netns,
		"CNI_IFNAME=" + r.ifName, "CNI_ARGS=" + r.args, "CNI_PATH=" + filepath.Dir(r.bin), "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdin = strings.NewReader(r.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := strings.TrimSpace(stdout.String() + " " + stderr.String())
	if err == nil {
		return out, 0, nil
	}
	var e struct {
		Code int `json:"code"`
	}
	_ = json.Unmarshal(stdout.Bytes(), &e)
	return out, e.Code, fmt.Errorf("%s %s: %w", filepath.Base(r.bin), command, err)
}
