package memlockhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/kube-rdma/kube-rdma/pkg/hostapi/attachment"
)

// NetdevCommand is the argument of the kube-rdma binary that runs the
// netdev hook: the runtime's own refusal of a container whose pod sandbox
// got none of the netdevs of its devices ("fail closed",
// docs/device-plugin.md). The daemon's NRI plugin refuses the same
// containers while it is connected; this hook refuses them whether the
// plugin is connected, stalled, restarting or off, since the runtime runs
// it from the device's CDI spec at every container creation.
const NetdevCommand = "netdev-hook"

// NetdevCheck is what one device's netdev hook checks.
type NetdevCheck struct {
	// StateDir is the CNI plugin's attachment records (a host path); ""
	// means the plugin is not installed, so no pod can have its netdevs.
	StateDir string
	// Pool is the device's pool; How says how its pods get netdevs
	// ("chained CNI"), for the message.
	Pool, How string
	// Devices are the devices the CDI device stands for (a shared pool's:
	// every member), each its RDMA name, or NAME@FUNCTION with its
	// attachment.FunctionID: a record covers it by either, so a device
	// renamed since its ADD (a re-probe) is still found, and a record of a
	// release that wrote no function by its name.
	Devices []string
	// Bound: the pool's NICs are bound at sandbox creation (binding
	// gpuAligned): a complete record of the sandbox that carries the pool's
	// binding covers every device, which then only name the pool's members
	// for the message.
	Bound bool
	// PodUIDs, when set, are the only pods whose containers are checked
	// (a DRA claim's pods when it was prepared, the ones the CNI plugin
	// attaches its devices for); a container of another pod, or of one
	// whose runtime names no pod UID, is let through as the NRI plugin
	// lets it through.
	PodUIDs []string
}

// CDINetdevHook is the createRuntime hook of one CDI device, run from the
// binary at path (a host path).
func CDINetdevHook(path string, c NetdevCheck) *cdispec.Hook {
	return &cdispec.Hook{HookName: "createRuntime", Path: path,
		Args: append([]string{filepath.Base(path), NetdevCommand, "--state-dir", c.StateDir, "--pool", c.Pool, "--how", c.How,
			"--devices", strings.Join(c.Devices, ",")}, append(boundArg(c.Bound), podsArg(c.PodUIDs)...)...)}
}

func boundArg(bound bool) []string {
	if !bound {
		return nil
	}
	return []string{"--bound"}
}

func podsArg(uids []string) []string {
	if len(uids) == 0 {
		return nil
	}
	return []string{"--pods", strings.Join(uids, ",")}
}

// The annotations that name a container's pod sandbox, by runtime: the
// runtime puts the CRI's sandbox on every container's OCI spec, and runc
// and crun pass the spec's annotations in the hook's state.
var (
	sandboxIDKeys = []string{"io.kubernetes.cri.sandbox-id", "io.kubernetes.cri-o.SandboxID"}
	podNSKeys     = []string{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"}
	podNameKeys   = []string{"io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"}
	podUIDKeys    = []string{"io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"}
	// A sandbox's own (pause) container; it holds no device.
	containerTypeKeys = []string{"io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType"}
)

// bundleSpec is the part of the container's OCI spec (<bundle>/config.json)
// the netdev hook reads.
type bundleSpec struct {
	Annotations map[string]string `json:"annotations"`
	Linux       *struct {
		Namespaces []struct {
			Type string `json:"type"`
		} `json:"namespaces"`
	} `json:"linux"`
}

// NetdevVerdict is what RunNetdev decided: Refused with the message, or
// let through for Reason.
type NetdevVerdict struct {
	Refused bool
	Message string
	Reason  string
}

// RunNetdev is the netdev hook: the OCI state on stdin. It refuses (an
// error with the message `kubectl describe pod` shows) a container of a pod
// whose sandbox has no complete attachment record of every device of c (of
// the pool's binding, with Bound); it
// lets through the sandbox's own container, a container in the host's
// network namespace (a hostNetwork pod: no CNI ADD runs for it) and a
// container whose runtime names no sandbox (one it cannot check: the NRI
// plugin and the daemon's detector still do), and, with PodUIDs, a
// container of another pod.
func RunNetdev(stdin io.Reader, c NetdevCheck) (NetdevVerdict, error) {
	st, err := readState(stdin)
	if err != nil {
		return NetdevVerdict{}, err
	}
	var spec bundleSpec
	if st.Bundle != "" {
		b, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
		if err != nil {
			return NetdevVerdict{}, fmt.Errorf("read the container's OCI spec: %w", err)
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			return NetdevVerdict{}, fmt.Errorf("read the container's OCI spec %s: %w", filepath.Join(st.Bundle, "config.json"), err)
		}
	}
	ann := st.Annotations
	if len(ann) == 0 {
		ann = spec.Annotations
	}
	if t := first(ann, containerTypeKeys); t == "sandbox" {
		return NetdevVerdict{Reason: "the pod sandbox's own container"}, nil
	}
	if spec.Linux != nil && !hasNetNS(spec) {
		return NetdevVerdict{Reason: "no network namespace of its own (hostNetwork)"}, nil
	}
	sandbox := first(ann, sandboxIDKeys)
	if sandbox == "" {
		return NetdevVerdict{Reason: "the runtime names no pod sandbox"}, nil
	}
	if len(c.PodUIDs) > 0 && !slices.Contains(c.PodUIDs, first(ann, podUIDKeys)) {
		return NetdevVerdict{Reason: "not a pod the devices were prepared for"}, nil
	}
	var recs []attachment.Attachment
	if c.StateDir != "" {
		var err error
		if recs, err = (attachment.Store{Dir: c.StateDir}).Records(); err != nil {
			return NetdevVerdict{}, fmt.Errorf("read the attachment records: %w", err)
		}
	}
	cov := attachment.Covered(recs, func(r attachment.Attachment) bool { return r.ContainerID == sandbox })
	var miss []string
	for _, d := range c.Devices {
		name, fn, _ := strings.Cut(d, "@")
		switch {
		case c.Bound:
			if !cov.Bindings[c.Pool] {
				miss = append(miss, name)
			}
		case !cov.Devices[name] && (fn == "" || !cov.Functions[fn]):
			miss = append(miss, name)
		}
	}
	if len(miss) == 0 {
		return NetdevVerdict{Reason: "attached"}, nil
	}
	pod := first(ann, podNSKeys) + "/" + first(ann, podNameKeys)
	if pod == "/" {
		pod = "of sandbox " + sandbox
	}
	v := NetdevVerdict{Refused: true, Message: attachment.NotAttachedMessage(pod, miss, c.Pool, c.How)}
	return v, errors.New(v.Message)
}

func hasNetNS(s bundleSpec) bool {
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == "network" {
			return true
		}
	}
	return false
}

func first(m map[string]string, keys []string) string {
	for _, k := range keys {
		if v := m[k]; v != "" {
			return v
		}
	}
	return ""
}
