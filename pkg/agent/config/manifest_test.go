package config

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestShippedConfigs parses the configuration shipped in the manifests, so the
// example and the parser cannot drift apart.
func TestShippedConfigs(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/manifests/device-plugin.yaml")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Kind != "ConfigMap" {
			continue
		}
		for name, text := range obj.Data {
			found++
			c, err := Parse([]byte(text))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if len(c.Pools) == 0 {
				t.Errorf("%s: no pools", name)
			}
		}
	}
	if found == 0 {
		t.Fatal("no ConfigMap data in the manifest")
	}
}
