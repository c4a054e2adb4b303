package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushPull pushes a two-platform image with SBOMs to go-containerregistry's in-process
// registry and reads it back: the index by tag has the digest the build reported, each
// platform's image pulls with its layer, and the SBOMs are the index's referrers, both where
// the registry answers the Referrers API and where it does not (the sha256-<hex> tag
// fallback, which is how the CNCF distribution registry keeps them). The in-process registry
// stands in for the distribution registry here; make release-check (hack/release-check.sh)
// pushes to the real one.
func TestPushPull(t *testing.T) {
	self, err := os.Executable() // a Go binary with build info: this test's
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		referrersAPI  bool
		wantReferrers string
	}{
		{"referrers api", true, "api"},
		{"tag fallback", false, "tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(tc.referrersAPI), registry.Logger(discard())))
			t.Cleanup(srv.Close)
			host := strings.TrimPrefix(srv.URL, "http://")
			dir, args := fixture(t)
			// The test binary as amd64's tool, so amd64 gets an SBOM and arm64 (not a Go
			// binary) none.
			if err := os.Link(self, filepath.Join(dir, "linux_amd64", "gotool")); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-file", filepath.Join(dir, "{os}_{arch}", "tool")+":/usr/local/bin/tool:0755")
			sp := parse(t, args)
			sp.files = append(sp.files, fileArg{src: filepath.Join(dir, "linux_amd64", "gotool"), dst: "/usr/local/bin/gotool", perm: 0o755})
			sp.platforms = sp.platforms[:1]
			b, err := build(sp)
			if err != nil {
				t.Fatal(err)
			}
			sum := filepath.Join(dir, "summary.json")
			if err := b.emit(outputs{push: host + "/kube-rdma:1.2.3", sbomDir: filepath.Join(dir, "sbom"), summary: sum}, io.Discard); err != nil {
				t.Fatal(err)
			}
			var s summary
			raw, err := os.ReadFile(sum)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatal(err)
			}
			if s.Referrers != tc.wantReferrers || len(s.SBOMs) != 1 || s.SBOMs[0].Binary != "/usr/local/bin/gotool" {
				t.Fatalf("summary: referrers %q, sboms %+v", s.Referrers, s.SBOMs)
			}

			ref, err := name.ParseReference(host + "/kube-rdma:1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(ref)
			if err != nil {
				t.Fatal(err)
			}
			d, err := idx.Digest()
			if err != nil || d.String() != s.Index {
				t.Fatalf("pulled index %s (%v), built %s", d, err, s.Index)
			}
			img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
			if err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("layers %d, %v", len(layers), err)
			}
			ld, err := layers[0].Digest()
			if err != nil || ld.String() != s.Manifests[0].Layer {
				t.Errorf("pulled layer %s (%v), built %s", ld, err, s.Manifests[0].Layer)
			}

			refs, err := remote.Referrers(ref.Context().Digest(s.Index))
			if err != nil {
				t.Fatal(err)
			}
			rm, err := refs.IndexManifest()
			if err != nil || len(rm.Manifests) != 1 {
				t.Fatalf("referrers: %+v, %v", rm, err)
			}
			art := rm.Manifests[0]
			if art.Digest.String() != s.SBOMs[0].Artifact || art.Annotations[annotationSBOMPlatform] != "linux/amd64" {
				t.Errorf("referrer %+v, want the artifact %s", art, s.SBOMs[0].Artifact)
			}
			// go-containerregistry's fallback tag index carries the manifest's artifactType;
			// its in-process registry's Referrers API answers the config's media type instead
			// (the empty config's): read the artifact itself.
			am, err := remote.Get(ref.Context().Digest(art.Digest.String()))
			if err != nil {
				t.Fatal(err)
			}
			var m v1.Manifest
			if err := json.Unmarshal(am.Manifest, &m); err != nil {
				t.Fatal(err)
			}
			if m.ArtifactType != mediaTypeCycloneDX || m.Subject == nil || m.Subject.Digest.String() != s.Index || len(m.Layers) != 1 {
				t.Errorf("artifact manifest: %s", am.Manifest)
			}
			if !tc.referrersAPI && art.ArtifactType != mediaTypeCycloneDX {
				t.Errorf("fallback tag index lists artifactType %q", art.ArtifactType)
			}
			checkSBOM(t, s.SBOMs[0].File)
		})
	}
}

// checkSBOM: the SBOM names this module and the go-containerregistry module this test links.
func checkSBOM(t *testing.T, file string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(f, cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	if bom.Metadata == nil || bom.Metadata.Component == nil || bom.Metadata.Component.Name != "gotool" {
		t.Fatalf("sbom metadata: %+v", bom.Metadata)
	}
	var got []string
	for _, c := range *bom.Components {
		if c.Name == "github.com/google/go-containerregistry" || c.Name == "stdlib" {
			got = append(got, c.Name)
		}
	}
	if diff := cmp.Diff([]string{"stdlib", "github.com/google/go-containerregistry"}, got); diff != "" {
		t.Errorf("sbom components (-want +got):\n%s", diff)
	}
}

func discard() *log.Logger { return log.New(io.Discard, "", 0) }
