package helm

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNRIOff: by default the daemon runs without the NRI plugin and mounts no NRI socket
// (--nri-fail-closed, which also governs the netdev hook, is passed either way: TestFailClosed).
func TestNRIOff(t *testing.T) {
	ds := daemonSet(t, render(t))
	if _, ok := hostPaths(ds)["/var/run/nri"]; ok {
		t.Error("the NRI socket's directory is mounted with nri.enabled=false")
	}
	for _, a := range ds.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--nri") && !strings.HasPrefix(a, "--nri-fail-closed=") {
			t.Errorf("device plugin arg %s with nri.enabled=false", a)
		}
	}
}

// TestNRIOn: nri.enabled passes --nri and the socket, and mounts the socket's host directory
// (read-write: connecting to a socket needs write access to it) at the same path; a pool's
// memlock passes the schema into the pools file.
func TestNRIOn(t *testing.T) {
	objs := render(t, "--set", "nri.enabled=true", "--set-json",
		`config.pools=[{"name":"hca","mode":"exclusive","memlock":"64Gi","selectors":{"kinds":["PF"]}}]`)
	ds := daemonSet(t, objs)
	c := ds.Template.Spec.Containers[0]
	for _, a := range []string{"--nri", "--nri-socket=/var/run/nri/nri.sock"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("device plugin args %q lack %s", c.Args, a)
		}
	}
	if ro, ok := hostPaths(ds)["/var/run/nri"]; !ok || ro {
		t.Errorf("host paths %v: want /var/run/nri read-write", hostPaths(ds))
	}
	var mounted []string
	for _, m := range c.VolumeMounts {
		if m.Name == "nri" {
			mounted = append(mounted, m.MountPath)
		}
	}
	if diff := cmp.Diff([]string{"/var/run/nri"}, mounted); diff != "" {
		t.Errorf("nri mount paths (-want +got):\n%s", diff)
	}
	for _, v := range ds.Template.Spec.Volumes {
		if v.Name == "nri" && (v.HostPath == nil || v.HostPath.Type != "DirectoryOrCreate") {
			t.Errorf("nri volume %+v: want a DirectoryOrCreate hostPath (a node without NRI still runs the daemon)", v)
		}
	}
	if cm := find(t, objs, "ConfigMap"); !strings.Contains(cm.Data["config.yaml"], "memlock: 64Gi") {
		t.Errorf("pools file lacks memlock: 64Gi:\n%s", cm.Data["config.yaml"])
	}
	objs = render(t, "--set", "nri.enabled=true", "--set", "nri.socket=/run/containerd/nri/nri.sock")
	if args := daemonSet(t, objs).Template.Spec.Containers[0].Args; !slices.Contains(args, "--nri-socket=/run/containerd/nri/nri.sock") {
		t.Errorf("device plugin args %q lack the socket given", args)
	}
	if _, ok := hostPaths(daemonSet(t, objs))["/run/containerd/nri"]; !ok {
		t.Error("another socket's directory is not mounted")
	}
}

// TestNRIRejected: the schema refuses a bad memlock and a relative socket.
func TestNRIRejected(t *testing.T) {
	for _, args := range [][]string{
		{"--set-json", `config.pools=[{"name":"hca","mode":"exclusive","memlock":"64GB","selectors":{"kinds":["PF"]}}]`},
		{"--set", "nri.socket=nri.sock"},
		{"--set", "nri.enable=true"},
	} {
		if out, err := helmTemplate(t, args...); err == nil {
			t.Errorf("helm template %s: rendered\n%.300s", strings.Join(args, " "), out)
		}
	}
}

// TestMemlockHook: the memlock hook's directory is mounted read-write at the host's path and
// passed to the daemon; without CDI (cdiDir "") or with memlockHookDir "" there is no hook, no
// mount and an empty flag.
func TestMemlockHook(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		dir  string
	}{
		{"default", nil, "/var/lib/kube-rdma/hooks"},
		{"other dir", []string{"--set", "devicePlugin.memlockHookDir=/opt/kr/hooks"}, "/opt/kr/hooks"},
		{"no cdi", []string{"--set", "devicePlugin.cdiDir="}, ""},
		{"off", []string{"--set", "devicePlugin.memlockHookDir="}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := daemonSet(t, render(t, tc.set...))
			if a := "--memlock-hook-dir=" + tc.dir; !slices.Contains(ds.Template.Spec.Containers[0].Args, a) {
				t.Errorf("device plugin args %q lack %s", ds.Template.Spec.Containers[0].Args, a)
			}
			for p, ro := range hostPaths(ds) {
				if strings.Contains(p, "hooks") && (p != tc.dir || ro) {
					t.Errorf("host path %s (read-only %v), want only %q read-write", p, ro, tc.dir)
				}
			}
			if _, ok := hostPaths(ds)[tc.dir]; tc.dir != "" && !ok {
				t.Errorf("host paths %v lack %s", hostPaths(ds), tc.dir)
			}
		})
	}
}
