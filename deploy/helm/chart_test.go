// Package helm holds the tests of the kube-rdma chart (deploy/helm/kube-rdma): they run
// `helm template` with several value sets and check what it renders with the project's own
// parsers (the device plugin's config, the CNI netconf). They need a helm binary: $HELM, helm in
// PATH, or the one e2e/local-node/build.sh builds; without one they skip.
package helm

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const chartDir = "kube-rdma"

func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	cache := os.Getenv("E2E_CACHE")
	if cache == "" {
		cache = "/var/cache/kube-rdma-e2e"
	}
	if h := filepath.Join(cache, "bin/current/helm"); isExecutable(h) {
		return h
	}
	t.Skip("no helm binary: set $HELM, put helm in PATH, or run e2e/local-node/build.sh helm")
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

type meta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   meta              `json:"metadata"`
	Data       map[string]string `json:"data"`
	Spec       json.RawMessage   `json:"spec"`
	// ServiceAccount
	AutomountServiceAccountToken *bool `json:"automountServiceAccountToken"`
	// ClusterRole, ClusterRoleBinding
	Rules    []rule          `json:"rules"`
	RoleRef  json.RawMessage `json:"roleRef"`
	Subjects json.RawMessage `json:"subjects"`
}

type rule struct {
	APIGroups     []string `json:"apiGroups"`
	Resources     []string `json:"resources"`
	Verbs         []string `json:"verbs"`
	ResourceNames []string `json:"resourceNames,omitempty"`
	// NonResourceURLs: the metrics-reader ClusterRole.
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
}

type container struct {
	Name            string   `json:"name"`
	Image           string   `json:"image"`
	Command         []string `json:"command"`
	Args            []string `json:"args"`
	Env             []envVar `json:"env"`
	SecurityContext struct {
		Privileged               *bool  `json:"privileged"`
		RunAsUser                *int64 `json:"runAsUser"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Add  []string `json:"add"`
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
		ReadOnly  bool   `json:"readOnly"`
		// MountPropagation is "" (None) or HostToContainer.
		MountPropagation string `json:"mountPropagation"`
	} `json:"volumeMounts"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
	} `json:"ports"`
	ReadinessProbe *probe `json:"readinessProbe"`
	LivenessProbe  *probe `json:"livenessProbe"`
	Resources      struct {
		Requests map[string]string `json:"requests"`
		Limits   map[string]string `json:"limits"`
	} `json:"resources"`
}

type probe struct {
	HTTPGet *struct {
		Host string `json:"host,omitempty"`
		Path string `json:"path"`
		Port any    `json:"port"`
	} `json:"httpGet,omitempty"`
	TCPSocket any `json:"tcpSocket,omitempty"`
	GRPC      any `json:"grpc,omitempty"`
	Exec      *struct {
		Command []string `json:"command"`
	} `json:"exec,omitempty"`
	TimeoutSeconds      int `json:"timeoutSeconds,omitempty"`
	InitialDelaySeconds int `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int `json:"periodSeconds,omitempty"`
	FailureThreshold    int `json:"failureThreshold,omitempty"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value,omitempty"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef,omitempty"`
	} `json:"valueFrom,omitempty"`
}

type daemonSetSpec struct {
	UpdateStrategy struct {
		Type          string `json:"type"`
		RollingUpdate *struct {
			MaxSurge       any `json:"maxSurge"`
			MaxUnavailable any `json:"maxUnavailable"`
		} `json:"rollingUpdate"`
	} `json:"updateStrategy"`
	Template struct {
		Metadata meta `json:"metadata"`
		Spec     struct {
			HostNetwork                  bool              `json:"hostNetwork"`
			HostPID                      bool              `json:"hostPID"`
			AutomountServiceAccountToken *bool             `json:"automountServiceAccountToken"`
			TerminationGracePeriod       *int64            `json:"terminationGracePeriodSeconds"`
			NodeSelector                 map[string]string `json:"nodeSelector"`
			Tolerations                  []map[string]any  `json:"tolerations"`
			InitContainers               []container       `json:"initContainers"`
			Containers                   []container       `json:"containers"`
			Volumes                      []struct {
				Name     string `json:"name"`
				HostPath *struct {
					Path string `json:"path"`
					Type string `json:"type"`
				} `json:"hostPath"`
				EmptyDir *struct {
					Medium string `json:"medium"`
				} `json:"emptyDir"`
				Projected *struct {
					Sources []struct {
						ServiceAccountToken *struct {
							Path string `json:"path"`
						} `json:"serviceAccountToken"`
					} `json:"sources"`
				} `json:"projected"`
			} `json:"volumes"`
		} `json:"spec"`
	} `json:"template"`
}

// render runs helm template on the chart with args and returns the objects.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var objs []object
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var o object
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("parse rendered document: %v\n%s", err, doc)
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	return objs
}

func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), append([]string{"template", "rdma", chartDir, "--namespace", "kube-rdma"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.Bytes(), err
	}
	return out, nil
}

func find(t *testing.T, objs []object, kind string) object {
	t.Helper()
	for _, o := range objs {
		if o.Kind == kind {
			return o
		}
	}
	t.Fatalf("no %s rendered", kind)
	return object{}
}

func daemonSet(t *testing.T, objs []object) daemonSetSpec {
	t.Helper()
	var ds daemonSetSpec
	if err := json.Unmarshal(find(t, objs, "DaemonSet").Spec, &ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

func kinds(objs []object) []string {
	var k []string
	for _, o := range objs {
		k = append(k, o.Kind)
	}
	sort.Strings(k)
	return k
}

// hostPaths returns the DaemonSet's host paths and, per path, whether every mount of it is
// read-only.
func hostPaths(ds daemonSetSpec) map[string]bool {
	spec := ds.Template.Spec
	byVolume := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			byVolume[v.Name] = v.HostPath.Path
		}
	}
	ro := map[string]bool{}
	for _, c := range append(append([]container{}, spec.InitContainers...), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			p, ok := byVolume[m.Name]
			if !ok {
				continue
			}
			if prev, seen := ro[p]; seen {
				ro[p] = prev && m.ReadOnly
			} else {
				ro[p] = m.ReadOnly
			}
		}
	}
	return ro
}

func containerNames(cs []container) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

// tokenContainers names the containers of the DaemonSet's pod that can read a service
// account token: every container when the pod automounts one, else those that mount a
// projected volume with a serviceAccountToken source at the path client-go reads.
func tokenContainers(t *testing.T, objs []object) []string {
	t.Helper()
	spec := daemonSet(t, objs).Template.Spec
	all := slices.Concat(spec.InitContainers, spec.Containers)
	var names []string
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		for _, c := range all {
			names = append(names, c.Name)
		}
		return names
	}
	tokens := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.Path == "token" {
				tokens[v.Name] = true
			}
		}
	}
	for _, c := range all {
		for _, m := range c.VolumeMounts {
			if tokens[m.Name] && m.MountPath == "/var/run/secrets/kubernetes.io/serviceaccount" {
				names = append(names, c.Name)
			}
		}
	}
	return names
}
