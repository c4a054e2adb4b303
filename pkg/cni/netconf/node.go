package netconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// NodeFileName is the node file's name in the CNI bin directory, next to
// the plugin's binary: `kube-rdma install --bin-dir` writes both, so the
// file is exactly as trusted as the binary (root-owned host directory, no
// tenant can write it), and the plugin finds it without a second host path.
const NodeFileName = "kube-rdma.json"

// NodeFileVersion is the node file's format version. A reader takes this
// version and refuses a newer one by name.
const NodeFileVersion = 1

// DefaultDRAClaimsDir is the DRA front end's claim records directory with
// the kubelet's default root (dra.ClaimsDir of the plugin directory).
const DefaultDRAClaimsDir = "/var/lib/kubelet/plugins/rdma.kube-rdma.io/claims"

// Node holds the host-level settings of the plugin on one node: where it
// reads and writes on the host, and whether a deviceID must be confirmed by
// the kubelet. They come from the node file, never from a netconf: a
// netconf may leave them out or repeat the node's value, and one that names
// another is refused (ErrInvalid), so creating a NetworkAttachmentDefinition
// gives no reach into the host.
type Node struct {
	Version       int    `json:"version"`
	StateDir      string `json:"stateDir,omitempty"`
	LogFile       string `json:"logFile,omitempty"`
	KubeletSocket string `json:"kubeletSocket,omitempty"`
	SysfsRoot     string `json:"sysfsRoot,omitempty"`
	ProcRoot      string `json:"procRoot,omitempty"`
	AllocDir      string `json:"allocDir,omitempty"`
	// DRAClaimsDir is where DRA mode reads claim records. A netconf turns
	// DRA mode on by naming it (draClaimsDir); it is not filled in for a
	// netconf that leaves it out.
	DRAClaimsDir string `json:"draClaimsDir,omitempty"`
	// RequirePodResources, when true (the default), refuses a deviceID the
	// kubelet cannot confirm for the pod; a netconf cannot turn it off.
	RequirePodResources *bool `json:"requirePodResources,omitempty"`
}

// DefaultNode is the node's settings when there is no node file.
func DefaultNode() Node {
	n := Node{Version: NodeFileVersion}
	_ = n.defaults()
	return n
}

// Require reports whether a deviceID must be confirmed by the kubelet.
func (n Node) Require() bool { return n.RequirePodResources == nil || *n.RequirePodResources }

// ParseNode decodes a node file and fills in the defaults of what it leaves
// out.
func ParseNode(data []byte) (Node, error) {
	var n Node
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return Node{}, fmt.Errorf("decode node file: %w", err)
	}
	if dec.More() {
		return Node{}, fmt.Errorf("node file: trailing data after the object")
	}
	switch {
	case n.Version == 0:
		return Node{}, fmt.Errorf("node file: no version")
	case n.Version > NodeFileVersion:
		return Node{}, fmt.Errorf("node file: version %d is newer than this plugin reads (%d)", n.Version, NodeFileVersion)
	}
	if err := n.defaults(); err != nil {
		return Node{}, err
	}
	return n, nil
}

// Marshal encodes the node file (with its version).
func (n Node) Marshal() ([]byte, error) {
	n.Version = NodeFileVersion
	b, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode node file: %w", err)
	}
	return append(b, '\n'), nil
}

// defaults fills in the default paths and checks each is absolute.
func (n *Node) defaults() error {
	for _, p := range []struct {
		name string
		v    *string
		def  string
	}{{"stateDir", &n.StateDir, DefaultStateDir}, {"sysfsRoot", &n.SysfsRoot, DefaultSysfsRoot},
		{"kubeletSocket", &n.KubeletSocket, DefaultKubeletSocket}, {"procRoot", &n.ProcRoot, DefaultProcRoot},
		{"allocDir", &n.AllocDir, DefaultAllocDir}, {"draClaimsDir", &n.DRAClaimsDir, DefaultDRAClaimsDir},
		{"logFile", &n.LogFile, ""}} {
		if *p.v == "" {
			*p.v = p.def
		}
		if *p.v != "" && !strings.HasPrefix(*p.v, "/") {
			return fmt.Errorf("node file: %s %q is not absolute", p.name, *p.v)
		}
	}
	return nil
}

// applyNode takes the host-level settings from the node: a field the
// netconf leaves out gets the node's value, one it names must be the
// node's.
func applyNode(c *Conf, r *raw, n Node) error {
	for _, p := range []struct {
		name     string
		conf     *string
		raw, def string
	}{{"stateDir", &c.StateDir, r.StateDir, n.StateDir}, {"logFile", &c.LogFile, r.LogFile, n.LogFile},
		{"kubeletSocket", &c.KubeletSocket, r.KubeletSocket, n.KubeletSocket}, {"sysfsRoot", &c.SysfsRoot, r.SysfsRoot, n.SysfsRoot},
		{"procRoot", &c.ProcRoot, r.ProcRoot, n.ProcRoot}, {"allocDir", &c.AllocDir, r.AllocDir, n.AllocDir}} {
		if p.raw != "" && p.raw != p.def {
			return invalid("%s %q is not this node's (%q): host paths come from the node file (%s), not the network configuration",
				p.name, p.raw, p.def, NodeFileName)
		}
		*p.conf = p.def
	}
	if r.DRAClaimsDir != "" && r.DRAClaimsDir != n.DRAClaimsDir {
		return invalid("draClaimsDir %q is not this node's (%q): host paths come from the node file (%s), not the network configuration",
			r.DRAClaimsDir, n.DRAClaimsDir, NodeFileName)
	}
	c.RequirePodResources = n.Require()
	if r.RequirePodResources != nil {
		if !*r.RequirePodResources && n.Require() {
			return invalid("requirePodResources false: this node requires the kubelet to confirm a deviceID (%s)", NodeFileName)
		}
		c.RequirePodResources = c.RequirePodResources || *r.RequirePodResources
	}
	return nil
}
