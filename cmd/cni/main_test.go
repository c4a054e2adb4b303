package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/internal/netnstest"
	"github.com/kube-rdma/kube-rdma/pkg/cni"
	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/discovery/nodesim"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/cniops"
)

// The test binary doubles as the plugin: run with KUBE_RDMA_AS_PLUGIN=1 it
// is the plugin's main.
func TestMain(m *testing.M) {
	if os.Getenv("KUBE_RDMA_AS_PLUGIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type run struct {
	stdout string
	exit   int
}

// writeNodeFile writes the node file n into a new directory and returns
// its path, for invoke's node; an empty AllocDir is a new empty directory.
func writeNodeFile(t *testing.T, n netconf.Node) string {
	t.Helper()
	if n.AllocDir == "" {
		// Not the host's: the daemon's pools file there is not the test's.
		n.AllocDir = t.TempDir()
	}
	b, err := n.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), netconf.NodeFileName)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// invoke runs the plugin as a runtime does, from inside host, with the
// node file node ("": none, the built-in defaults).
func invoke(t *testing.T, host *netnstest.NS, node, command, netnsPath, stdin string) run {
	t.Helper()
	return invokeEnv(t, host, stdin, node, "CNI_COMMAND="+command, "CNI_CONTAINERID=ctr1",
		"CNI_NETNS="+netnsPath, "CNI_IFNAME=net1", "CNI_PATH=/usr/lib/cni")
}

// invokeEnv runs the plugin with exactly the CNI_* variables given and the
// node file node ("": none).
func invokeEnv(t *testing.T, host *netnstest.NS, stdin, node string, cniEnv ...string) run {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"KUBE_RDMA_AS_PLUGIN=1"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CNI_") && !strings.HasPrefix(kv, cni.NodeFileEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if node != "" {
		cmd.Env = append(cmd.Env, cni.NodeFileEnv+"="+node)
	}
	cmd.Env = append(cmd.Env, cniEnv...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := host.Do(cmd.Run)
	r := run{stdout: out.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.exit = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run plugin: %v", err)
	}
	t.Logf("%v: exit %d, stdout %s, stderr %s", cniEnv, r.exit, r.stdout, errb.String())
	return r
}

func TestPluginAsTheRuntimeRunsIt(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	netnstest.Veth(t, host, "nic0", "peer0")
	port := nodesim.Port{State: nodesim.StateActive, PhysState: nodesim.PhysLinkUp, LinkLayer: "Ethernet"}
	tree, err := nodesim.Build(t.TempDir(), nodesim.Topology{
		PCI: []nodesim.Function{{Path: "pci0000:00/0000:00:01.0/0000:01:00.0", Vendor: "15b3", Device: "1017", Class: "020000",
			Driver: "mlx5_core", NUMANode: -1, Netdevs: []nodesim.Netdev{{Name: "nic0"}}}},
		RDMA: []nodesim.RDMA{{Name: "mlx5_0", Parent: "0000:01:00.0", Ports: []nodesim.Port{port}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	off := false
	node := writeNodeFile(t, netconf.Node{StateDir: filepath.Join(dir, "state"), SysfsRoot: tree.SysRoot,
		KubeletSocket: filepath.Join(dir, "none.sock"), RequirePodResources: &off})
	base := `"cniVersion":"1.1.0","name":"rdma","type":"kube-rdma","rdmaNetnsMode":"shared","mtu":9000,` +
		`"runtimeConfig":{"deviceID":"mlx5_0"}`
	before := netnstest.Links(t, host)

	add := invoke(t, host, node, "ADD", pod.Path, "{"+base+"}")
	if add.exit != 0 {
		t.Fatalf("ADD exit %d", add.exit)
	}
	var res types100.Result
	if err := json.Unmarshal([]byte(add.stdout), &res); err != nil {
		t.Fatalf("ADD printed %q: %v", add.stdout, err)
	}
	if res.CNIVersion != "1.1.0" || len(res.Interfaces) != 1 || res.Interfaces[0].Name != "net1" || res.Interfaces[0].Sandbox != pod.Path {
		t.Errorf("ADD result = %s", add.stdout)
	}
	if got := netnstest.Links(t, pod); len(got) != 1 || got[0].Name != "net1" || got[0].MTU != 9000 || !got[0].Up {
		t.Errorf("pod links = %v", got)
	}
	if r := invoke(t, host, node, "CHECK", pod.Path, "{"+base+`,"prevResult":`+add.stdout+"}"); r.exit != 0 {
		t.Errorf("CHECK exit %d", r.exit)
	}
	for range 2 {
		if r := invoke(t, host, node, "DEL", pod.Path, "{"+base+"}"); r.exit != 0 || r.stdout != "" {
			t.Errorf("DEL exit %d, stdout %q", r.exit, r.stdout)
		}
	}
	if diff := cmp.Diff(before, netnstest.Links(t, host)); diff != "" {
		t.Errorf("host links after DEL (-before +after):\n%s", diff)
	}

	bad := invoke(t, host, node, "ADD", pod.Path, "{"+base+`,"master":"eth0"}`)
	var cerr types.Error
	if err := json.Unmarshal([]byte(bad.stdout), &cerr); err != nil || bad.exit == 0 || cerr.Code != types.ErrInvalidNetworkConfig || cerr.Details == "" {
		t.Errorf("ADD with an unknown field: exit %d, stdout %q, want a CNI error with code %d", bad.exit, bad.stdout, types.ErrInvalidNetworkConfig)
	}
	// STATUS fails with "plugin not available" on a kernel without RDMA.
	st := invoke(t, host, node, "STATUS", "", "{"+base+"}")
	if st.exit != 0 {
		if err := json.Unmarshal([]byte(st.stdout), &cerr); err != nil || cerr.Code != types.ErrPluginNotAvailable {
			t.Errorf("STATUS: exit %d, stdout %q", st.exit, st.stdout)
		}
	}
	if v := invoke(t, host, node, "VERSION", "", "{"+base+"}"); !strings.Contains(v.stdout, `"supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]`) {
		t.Errorf("VERSION = %q", v.stdout)
	}

	// Each command but VERSION left its outcome in the operations spool
	// for the daemon's metrics (package cniops).
	var got []string
	for range 2 { // a file is read one Drain after it is taken
		if _, err := cniops.Drain(cniops.Dir(filepath.Join(dir, "state")), func(r cniops.Record) {
			if r.Duration <= 0 || r.Pool != "" {
				t.Errorf("record %+v: want a duration and no pool", r)
			}
			got = append(got, fmt.Sprintf("%s %d", r.Command, r.Code))
		}); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"ADD 0", "CHECK 0", "DEL 0", "DEL 0", "ADD 7", fmt.Sprintf("STATUS %d", cerrCode(st))}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("operation records (-want +got)\n%s", diff)
	}
}

// cerrCode is the CNI error code of a run: 0 when it succeeded.
func cerrCode(r run) uint {
	var e types.Error
	if r.exit == 0 || json.Unmarshal([]byte(r.stdout), &e) != nil {
		return 0
	}
	return e.Code
}

// TestErrorsCarryCNIVersion: every error the binary prints is the spec's
// error result, with cniVersion: the configuration's when it is one the
// plugin speaks, else the latest it speaks (1.1.0). Errors skel finds
// (environment, JSON, version) and the handlers' errors alike.
func TestErrorsCarryCNIVersion(t *testing.T) {
	host, pod := netnstest.New(t), netnstest.New(t)
	dir := t.TempDir()
	tree, err := nodesim.Build(t.TempDir(), nodesim.Topology{})
	if err != nil {
		t.Fatal(err)
	}
	off := false
	node := writeNodeFile(t, netconf.Node{StateDir: filepath.Join(dir, "state"), SysfsRoot: tree.SysRoot,
		KubeletSocket: filepath.Join(dir, "none.sock"), RequirePodResources: &off})
	conf := func(ver, extra string) string {
		return `{"cniVersion":"` + ver + `","name":"rdma","type":"kube-rdma","rdmaNetnsMode":"shared"` + extra + `}`
	}
	env := func(command string) []string {
		return []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=ctr1", "CNI_NETNS=" + pod.Path, "CNI_IFNAME=net1", "CNI_PATH=/usr/lib/cni"}
	}
	for _, tc := range []struct {
		name  string
		stdin string
		env   []string
		code  uint
		ver   string
	}{
		{"malformed json", `{"cniVersion":"1.0.0",`, env("ADD"), types.ErrDecodingFailure, "1.1.0"},
		{"unknown field", conf("1.0.0", `,"master":"eth0","runtimeConfig":{"deviceID":"mlx5_0"}`), env("ADD"), types.ErrInvalidNetworkConfig, "1.0.0"},
		{"no name (skel)", `{"cniVersion":"0.4.0","type":"kube-rdma"}`, env("ADD"), types.ErrInvalidNetworkConfig, "0.4.0"},
		{"unsupported version (skel)", conf("0.2.0", `,"runtimeConfig":{"deviceID":"mlx5_0"}`), env("ADD"), types.ErrIncompatibleCNIVersion, "1.1.0"},
		{"no such device", conf("1.0.0", `,"runtimeConfig":{"deviceID":"mlx5_9"}`), env("ADD"), 100, "1.0.0"},
		{"missing CNI_NETNS (skel)", conf("0.4.0", `,"runtimeConfig":{"deviceID":"mlx5_0"}`),
			[]string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=ctr1", "CNI_IFNAME=net1", "CNI_PATH=/usr/lib/cni"}, types.ErrInvalidEnvironmentVariables, "0.4.0"},
		{"CHECK without attachment", conf("1.1.0", `,"runtimeConfig":{"deviceID":"mlx5_0"}`), env("CHECK"), 104, "1.1.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := invokeEnv(t, host, tc.stdin, node, tc.env...)
			var got struct {
				CNIVersion string `json:"cniVersion"`
				Code       uint   `json:"code"`
				Msg        string `json:"msg"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.exit == 0 {
				t.Fatalf("exit %d, stdout %q: want a CNI error", r.exit, r.stdout)
			}
			if got.CNIVersion != tc.ver || got.Code != tc.code || got.Msg == "" {
				t.Errorf("error = %+v, want cniVersion %s, code %d and a msg", got, tc.ver, tc.code)
			}
		})
	}
}
