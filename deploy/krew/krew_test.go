// Package krew holds the krew plugin manifest of kubectl-rdma; its test
// checks the manifest's shape against the plugin.
package krew

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kube-rdma/kube-rdma/pkg/kubectlrdma"
)

// plugin is the part of krew's index.Plugin (v1alpha2) that krew validates.
type plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []platform `json:"platforms"`
	} `json:"spec"`
}

type platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256"`
	Bin    string `json:"bin"`
	Files  []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

func TestManifest(t *testing.T) {
	b, err := os.ReadFile("rdma.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("rdma.yaml: %v", err)
	}
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "rdma" {
		t.Errorf("apiVersion %q kind %q name %q", p.APIVersion, p.Kind, p.Metadata.Name)
	}
	s := p.Spec
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(s.Version) || !strings.HasPrefix(s.Homepage, "https://") ||
		s.ShortDescription == "" || len(s.ShortDescription) > 60 {
		t.Errorf("version %q, homepage %q, shortDescription %q (%d chars)", s.Version, s.Homepage, s.ShortDescription, len(s.ShortDescription))
	}
	seen := map[string]bool{}
	for i, pl := range s.Platforms {
		key := pl.Selector.MatchLabels["os"] + "/" + pl.Selector.MatchLabels["arch"]
		archive := fmt.Sprintf("/releases/download/%s/kubectl-rdma_%s_%s.tar.gz", s.Version, s.Version, strings.ReplaceAll(key, "/", "_"))
		switch {
		case seen[key] || !slices.Contains([]string{"linux", "darwin"}, pl.Selector.MatchLabels["os"]):
			t.Errorf("platform %d: selector %s repeated or unknown", i, key)
		case !strings.HasSuffix(pl.URI, archive):
			t.Errorf("platform %s: uri %q, want it to end in %q", key, pl.URI, archive)
		case !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(pl.Sha256):
			t.Errorf("platform %s: sha256 %q", key, pl.Sha256)
		case pl.Bin != "kubectl-rdma" || len(pl.Files) == 0 || pl.Files[0].From != "kubectl-rdma":
			t.Errorf("platform %s: bin %q, files %+v: want the kubectl-rdma binary", key, pl.Bin, pl.Files)
		}
		seen[key] = true
	}
	if !seen["linux/amd64"] || !seen["linux/arm64"] {
		t.Errorf("platforms %v lack linux/amd64 or linux/arm64", seen)
	}
	// The description names every command the plugin has.
	root := kubectlrdma.NewRootCommand(&kubectlrdma.Options{})
	for _, c := range root.Commands() {
		if c.Name() != "help" && !strings.Contains(s.Description, "  "+c.Name()+" ") {
			t.Errorf("description does not name the %s command", c.Name())
		}
	}
}
