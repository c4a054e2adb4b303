package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kube-rdma/kube-rdma/pkg/cni/netconf"
	"github.com/kube-rdma/kube-rdma/pkg/cniinstall"
	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

const (
	calicoList = `{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico","x":1.50},{"type":"portmap"}]}`
	pluginConf = `{"type":"kube-rdma","resourceName":"rdma.kube-rdma.io/hca"}`
)

// installDirs is a node's CNI directories, a plugin config and a state dir.
type installDirs struct{ bin, conf, state, plugin, conflist string }

func newInstallDirs(t *testing.T, conflist string) installDirs {
	t.Helper()
	root := t.TempDir()
	d := installDirs{bin: filepath.Join(root, "bin"), conf: filepath.Join(root, "net.d"), state: filepath.Join(root, "state"),
		plugin: filepath.Join(root, "plugin.json")}
	d.conflist = filepath.Join(d.conf, "10-calico.conflist")
	for _, dir := range []string{d.bin, d.conf, d.state} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for path, content := range map[string]string{d.plugin: pluginConf, d.conflist: conflist} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func (d installDirs) chained(t *testing.T) bool {
	t.Helper()
	data, err := os.ReadFile(d.conflist)
	if err != nil {
		t.Fatalf("conflist: %v", err)
	}
	return cniinstall.NamesPlugin(data)
}

// The binary copies itself (this test binary, as main) byte for byte, and
// leaves the copy alone the second time.
func TestInstallCopiesItself(t *testing.T) {
	dir := t.TempDir()
	for i := range 2 {
		out, errOut, exit := runBinary(t, []string{"install", "--bin-dir=" + dir, "--log-format=text"}, nil, "")
		if exit != 0 || out != "" {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", i, exit, out, errOut)
		}
		if want := "copied=" + []string{"true", "false"}[i]; !strings.Contains(errOut, want) {
			t.Errorf("run %d: stderr %q, want %q", i, errOut, want)
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "kube-rdma"))
	if err != nil || !bytes.Equal(got, self) {
		t.Fatalf("installed binary: %d bytes, %v; want the %d bytes of %s", len(got), err, len(self), os.Args[0])
	}
	if fi, _ := os.Stat(filepath.Join(dir, "kube-rdma")); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode().Perm())
	}
	var names []string
	if ents, _ := os.ReadDir(dir); ents != nil {
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	if diff := cmp.Diff([]string{"kube-rdma", netconf.NodeFileName}, names); diff != "" {
		t.Errorf("bin dir (-want +got):\n%s", diff)
	}
}

// Chained once (the init container): exit 0, logs as JSON lines on stderr,
// nothing on stdout. Failures: one line on stderr saying what was done.
func TestInstallChainExits(t *testing.T) {
	tests := []struct {
		name     string
		conflist string
		extra    []string
		exit     int
		errLine  string // the last line of stderr
	}{
		{name: "chained", conflist: calicoList},
		// Flannel's list (Cilium's too is 0.3.1): main refused it, the init container exited 1
		// and the daemon never started on that node.
		{name: "0.3.1 chained", conflist: `{"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}`},
		{name: "unsupported cniVersion", conflist: `{"cniVersion":"0.2.0","name":"n","plugins":[{"type":"bridge"}]}`, exit: 1,
			errLine: "kube-rdma: install: chain kube-rdma into "},
		{name: "no such conflist", conflist: calicoList, extra: []string{"--conflist=99-none.conflist", "--timeout=50ms"}, exit: 1,
			errLine: "kube-rdma: install: no conflist 99-none.conflist in "},
		{name: "remove-on-exit without watch", conflist: calicoList, extra: []string{"--remove-on-exit"}, exit: 2,
			errLine: "kube-rdma: install: --remove-on-exit needs --watch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newInstallDirs(t, tt.conflist)
			args := append([]string{"install", "--bin-dir=" + d.bin, "--conf-dir=" + d.conf, "--plugin-config=" + d.plugin}, tt.extra...)
			out, errOut, exit := runBinary(t, args, nil, "")
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if exit != tt.exit || out != "" || !strings.HasPrefix(last, tt.errLine) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, last line %q", exit, out, errOut, tt.exit, tt.errLine)
			}
			if tt.exit == 2 {
				return // usage on stderr
			}
			if tt.exit != 0 {
				lines = lines[:len(lines)-1]
			}
			for _, l := range lines {
				if !json.Valid([]byte(l)) {
					t.Errorf("stderr line %q is not a JSON log line", l)
				}
			}
			if got := d.chained(t); got != (tt.exit == 0) {
				t.Errorf("conflist chained %v, want %v", got, tt.exit == 0)
			}
		})
	}
}

// The cni-chain container: --watch --remove-on-exit until a signal, then
// exit 0 with the entry out, and the binary out unless a pod is attached.
func TestInstallWatchUntilSignal(t *testing.T) {
	for _, tt := range []struct {
		name     string
		sig      syscall.Signal
		attached bool
	}{
		{"SIGTERM", syscall.SIGTERM, false},
		{"SIGINT, pod attached", syscall.SIGINT, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newInstallDirs(t, calicoList)
			if tt.attached {
				boot, err := attachment.ReadBootID("/proc")
				if err != nil {
					t.Skipf("no boot id: %v", err)
				}
				if err := (attachment.Store{Dir: d.state, BootID: boot}).Save(attachment.Attachment{Key: attachment.Key{ContainerID: "c", IfName: "net1"}}); err != nil {
					t.Fatal(err)
				}
			}
			cmd := binaryCommand("install", "--bin-dir="+d.bin, "--conf-dir="+d.conf, "--plugin-config="+d.plugin,
				"--state-dir="+d.state, "--watch", "--remove-on-exit")
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			for deadline := time.Now().Add(10 * time.Second); !d.chained(t); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("not chained after 10s; stderr %s", errb.String())
				}
			}
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exit after %v: %v; stderr %s", tt.sig, err, errb.String())
			}
			if d.chained(t) {
				t.Error("entry still in the conflist")
			}
			_, err := os.Stat(filepath.Join(d.bin, "kube-rdma"))
			if kept := err == nil; kept != tt.attached {
				t.Errorf("binary kept %v, want %v (pod attached %v)", kept, tt.attached, tt.attached)
			}
		})
	}
}

// TestInstallWritesNodeFile: install --bin-dir writes the node file from
// its flags next to the binary, and the installed binary, run as the
// runtime runs it, takes its host paths from there: a netconf naming
// another state dir is refused with the node's in the message.
func TestInstallWritesNodeFile(t *testing.T) {
	dir, state := t.TempDir(), t.TempDir()
	_, errOut, exit := runBinary(t, []string{"install", "--bin-dir=" + dir, "--state-dir=" + state, "--kubelet-socket=/k/kubelet.sock",
		"--sysfs-root=/host/sys", "--log-file=/var/log/kube-rdma-cni.log", "--require-pod-resources=false", "--log-format=text"}, nil, "")
	if exit != 0 {
		t.Fatalf("install: exit %d, stderr %s", exit, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, netconf.NodeFileName))
	if err != nil {
		t.Fatal(err)
	}
	got, err := netconf.ParseNode(b)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	want := netconf.Node{Version: netconf.NodeFileVersion, StateDir: state, LogFile: "/var/log/kube-rdma-cni.log",
		KubeletSocket: "/k/kubelet.sock", SysfsRoot: "/host/sys", ProcRoot: netconf.DefaultProcRoot, AllocDir: netconf.DefaultAllocDir,
		DRAClaimsDir: netconf.DefaultDRAClaimsDir, RequirePodResources: &off}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("node file (-want +got):\n%s", diff)
	}

	cmd := exec.Command(filepath.Join(dir, cniinstall.BinaryName))
	cmd.Env = []string{"KUBE_RDMA_AS_PLUGIN=1", "CNI_COMMAND=ADD", "CNI_CONTAINERID=c", "CNI_NETNS=/nonexistent", "CNI_IFNAME=net1", "CNI_PATH=/usr/lib/cni"}
	cmd.Stdin = strings.NewReader(`{"cniVersion":"1.0.0","name":"n","type":"kube-rdma","stateDir":"/tmp/elsewhere","runtimeConfig":{"deviceID":"mlx5_0"}}`)
	out, _ := cmd.Output()
	var cerr struct {
		Code    uint   `json:"code"`
		Details string `json:"details"`
	}
	if err := json.Unmarshal(out, &cerr); err != nil || cerr.Code != 7 || !strings.Contains(cerr.Details, state) {
		t.Errorf("installed binary, netconf stateDir elsewhere: %s, want code 7 naming the node's %s", out, state)
	}
}
