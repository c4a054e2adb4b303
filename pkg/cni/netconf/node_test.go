package netconf

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var testNode = Node{StateDir: "/n/state", LogFile: "/n/log", KubeletSocket: "/n/kubelet.sock", SysfsRoot: "/n/sys",
	ProcRoot: "/n/proc", AllocDir: "/n/alloc", DRAClaimsDir: "/n/claims"}

// TestParseRefusesOtherHostPaths: a netconf naming a host path other than
// the node's is refused, with the field and the node's value in the message;
// one that repeats the node's value or leaves it out gets the node's.
func TestParseRefusesOtherHostPaths(t *testing.T) {
	const base = `"cniVersion":"1.1.0","name":"n","type":"kube-rdma"`
	for _, tc := range []struct{ field, node string }{
		{"stateDir", testNode.StateDir}, {"logFile", testNode.LogFile}, {"kubeletSocket", testNode.KubeletSocket},
		{"sysfsRoot", testNode.SysfsRoot}, {"procRoot", testNode.ProcRoot}, {"allocDir", testNode.AllocDir},
		{"draClaimsDir", testNode.DRAClaimsDir},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := Parse([]byte(`{`+base+`,"`+tc.field+`":"/etc/evil"}`), testNode)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.node) {
				t.Errorf("Parse with %s=/etc/evil: %v, want ErrInvalid naming %s and %q", tc.field, err, tc.field, tc.node)
			}
			if _, err := Parse([]byte(`{`+base+`,"`+tc.field+`":"`+tc.node+`"}`), testNode); err != nil {
				t.Errorf("Parse with the node's %s: %v", tc.field, err)
			}
		})
	}
	c, err := Parse([]byte(`{`+base+`}`), testNode)
	if err != nil {
		t.Fatal(err)
	}
	got := Node{StateDir: c.StateDir, LogFile: c.LogFile, KubeletSocket: c.KubeletSocket, SysfsRoot: c.SysfsRoot,
		ProcRoot: c.ProcRoot, AllocDir: c.AllocDir, DRAClaimsDir: testNode.DRAClaimsDir}
	if diff := cmp.Diff(testNode, got); diff != "" || c.DRAClaimsDir != "" || !c.RequirePodResources {
		t.Errorf("omitted paths (-node +conf):\n%s; draClaimsDir %q (want none: DRA mode only when named), requirePodResources %v",
			diff, c.DRAClaimsDir, c.RequirePodResources)
	}
}

func TestParseRequirePodResources(t *testing.T) {
	off, on := false, true
	const base = `"cniVersion":"1.1.0","name":"n","type":"kube-rdma"`
	for _, tc := range []struct {
		name    string
		node    *bool
		conf    string
		want    bool
		wantErr bool
	}{
		{name: "default", conf: "", want: true},
		{name: "node default, netconf off", conf: `,"requirePodResources":false`, wantErr: true},
		{name: "node on, netconf off", node: &on, conf: `,"requirePodResources":false`, wantErr: true},
		{name: "node off", node: &off, conf: "", want: false},
		{name: "node off, netconf on", node: &off, conf: `,"requirePodResources":true`, want: true},
		{name: "node off, netconf off", node: &off, conf: `,"requirePodResources":false`, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(`{`+base+tc.conf+`}`), Node{RequirePodResources: tc.node})
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("Parse = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.RequirePodResources != tc.want {
				t.Errorf("RequirePodResources = %v, want %v", c.RequirePodResources, tc.want)
			}
		})
	}
}

func TestParseNode(t *testing.T) {
	b, err := testNode.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNode(b)
	if err != nil {
		t.Fatal(err)
	}
	want := testNode
	want.Version = NodeFileVersion
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	def, err := ParseNode([]byte(`{"version":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(DefaultNode(), def); diff != "" {
		t.Errorf("empty node file (-defaults +got):\n%s", diff)
	}
	for _, bad := range []string{`{}`, `{"version":2}`, `{"version":1,"stateDir":"rel"}`, `{"version":1,"master":"x"}`, `{"version":1}{}`, `[`} {
		if _, err := ParseNode([]byte(bad)); err == nil {
			t.Errorf("ParseNode(%s) accepted", bad)
		}
	}
}
