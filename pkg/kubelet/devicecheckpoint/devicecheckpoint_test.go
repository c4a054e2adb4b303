package devicecheckpoint

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubelet134 is a checkpoint as kubelet 1.34 writes it (json.Marshal of
// checkpoint.Data: DeviceIDs per NUMA node, the Allocate response in
// base64): one pod with two resources in two containers, another with one,
// and a resource registered with no healthy device.
const kubelet134 = `{"Data":{"PodDeviceEntries":[` +
	`{"PodUID":"uid-a","ContainerName":"main","ResourceName":"kube-rdma.io/vf","DeviceIDs":{"0":["0000:3b:00.2"]},"AllocResp":"CiQKHEtVQkVfUkRNQV9WRl9SRE1BX0RFVklDRVMSBG1seDVfMg=="},` +
	`{"PodUID":"uid-a","ContainerName":"side","ResourceName":"nvidia.com/gpu","DeviceIDs":{"-1":["GPU-1"]},"AllocResp":""},` +
	`{"PodUID":"uid-b","ContainerName":"main","ResourceName":"nvidia.com/gpu","DeviceIDs":{"1":["GPU-2"]},"AllocResp":""}],` +
	`"RegisteredDevices":{"kube-rdma.io/vf":["0000:3b:00.2","0000:3b:00.3"],"nvidia.com/gpu":["GPU-1","GPU-2"],"kube-rdma.io/down":[]}},` +
	`"Checksum":2413526346}`

func TestParse(t *testing.T) {
	c, err := Parse([]byte(kubelet134))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uid, resource string
		want          bool
	}{
		{"uid-a", "kube-rdma.io/vf", true},
		{"uid-a", "nvidia.com/gpu", true},
		{"uid-b", "nvidia.com/gpu", true},
		{"uid-b", "kube-rdma.io/vf", false},
		{"uid-c", "kube-rdma.io/vf", false},
	} {
		if got := c.Holds(tc.uid, tc.resource); got != tc.want {
			t.Errorf("Holds(%s, %s) = %v, want %v", tc.uid, tc.resource, got, tc.want)
		}
	}
	for r, want := range map[string]bool{"kube-rdma.io/vf": true, "nvidia.com/gpu": true, "kube-rdma.io/down": false, "kube-rdma.io/other": false} {
		if got := c.Registered(r); got != want {
			t.Errorf("Registered(%s) = %v, want %v", r, got, want)
		}
	}
}

// TestParseNoPods: a kubelet with no pod holding a device writes null
// entries; that is a checkpoint, not an unknown format.
func TestParseNoPods(t *testing.T) {
	c, err := Parse([]byte(`{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{"kube-rdma.io/vf":["a"]}},"Checksum":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Registered("kube-rdma.io/vf") || c.Holds("uid-a", "kube-rdma.io/vf") {
		t.Errorf("got %+v, want vf registered and no pod", c)
	}
}

func TestParseUnknown(t *testing.T) {
	for name, s := range map[string]string{
		"not json":                         `{"Data":`,
		"not an object":                    `[]`,
		"no checksum":                      `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}}}`,
		"no data":                          `{"Checksum":1}`,
		"null data":                        `{"Data":null,"Checksum":1}`,
		"no entries":                       `{"Data":{"RegisteredDevices":{}},"Checksum":1}`,
		"no registered":                    `{"Data":{"PodDeviceEntries":null},"Checksum":1}`,
		"entries an object":                `{"Data":{"PodDeviceEntries":{},"RegisteredDevices":{}},"Checksum":1}`,
		"entry without uid":                `{"Data":{"PodDeviceEntries":[{"ResourceName":"r"}],"RegisteredDevices":{}},"Checksum":1}`,
		"entry without resource":           `{"Data":{"PodDeviceEntries":[{"PodUID":"u"}],"RegisteredDevices":{}},"Checksum":1}`,
		"renamed fields (a future format)": `{"Data":{"Entries":[],"Registered":{}},"Checksum":1}`,
	} {
		if _, err := Parse([]byte(s)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kubelet_internal_checkpoint")
	if _, err := Read(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v, want ErrNotExist", err)
	}
	if err := os.WriteFile(p, []byte(kubelet134), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Read(p)
	if err != nil || !c.Holds("uid-a", "kube-rdma.io/vf") {
		t.Errorf("Read = %+v, %v", c, err)
	}
	big := `{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":1,"pad":"` + strings.Repeat("x", maxSize) + `"}`
	if err := os.WriteFile(p, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); !errors.Is(err, ErrFormat) {
		t.Errorf("oversized: err = %v, want ErrFormat", err)
	}
}
