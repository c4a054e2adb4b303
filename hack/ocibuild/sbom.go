package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime/debug"
	"sort"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// The SBOM's media type, the artifactType of the artifact that carries it.
const mediaTypeCycloneDX = "application/vnd.cyclonedx+json"

// sbomFile is one written SBOM.
type sbomFile struct {
	summary sbomSummary
	data    []byte
}

// writeSBOMs writes a CycloneDX SBOM of every Go binary in each platform's image to
// dir/OS_ARCH/NAME.cdx.json. A file without Go build info is not a Go binary and gets none.
func (b *built) writeSBOMs(dir string) ([]sbomFile, error) {
	var out []sbomFile
	for _, pi := range b.images {
		paths := make([]string, 0, len(pi.tree.entries))
		for p, e := range pi.tree.entries {
			if e.src != "" {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		for _, p := range paths {
			src := pi.tree.entries[p].src
			bi, err := buildinfo.ReadFile(src)
			if err != nil {
				continue // not a Go binary
			}
			data, err := sbomOf(src, "/"+p, bi, b.epoch)
			if err != nil {
				return nil, fmt.Errorf("sbom of %s: %w", src, err)
			}
			file := filepath.Join(dir, platformKey(pi.platform), path.Base(p)+".cdx.json")
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return nil, fmt.Errorf("write sbom: %w", err)
			}
			if err := os.WriteFile(file, data, 0o644); err != nil {
				return nil, fmt.Errorf("write sbom: %w", err)
			}
			sum := sha256.Sum256(data)
			out = append(out, sbomFile{data: data, summary: sbomSummary{
				Platform: pi.platform.String(), Binary: "/" + p, File: file, SHA256: hex.EncodeToString(sum[:]),
			}})
		}
	}
	return out, nil
}

// sbomOf is the CycloneDX JSON of the Go binary src, at path in the image, from its embedded
// build info: the main module, every module it links (replacements resolved), the Go
// toolchain, and the build settings as properties. The serial number comes from the binary's
// sha256 and the time is epoch, so the same binary gives the same bytes.
func sbomOf(src, imagePath string, bi *debug.BuildInfo, epoch time.Time) ([]byte, error) {
	bin, err := os.ReadFile(src)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(bin)
	binHash := hex.EncodeToString(sum[:])

	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuidOf(sum[:16])
	mainRef := purl(bi.Main.Path, bi.Main.Version)
	settings := []cdx.Property{{Name: "go:path", Value: bi.Path}, {Name: "image:path", Value: imagePath}}
	for _, s := range bi.Settings {
		settings = append(settings, cdx.Property{Name: "go:build:" + s.Key, Value: s.Value})
	}
	bom.Metadata = &cdx.Metadata{
		Timestamp: epoch.Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "kube-rdma hack/ocibuild",
			Description: "CycloneDX from the binary's Go build info (debug/buildinfo)",
		}}},
		Component: &cdx.Component{
			BOMRef: mainRef, Type: cdx.ComponentTypeApplication, Name: path.Base(imagePath),
			Version: bi.Main.Version, PackageURL: mainRef,
			Hashes:     &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: binHash}},
			Properties: &settings,
		},
	}
	goRef := purl("stdlib", bi.GoVersion)
	comps := []cdx.Component{{BOMRef: goRef, Type: cdx.ComponentTypeLibrary, Name: "stdlib", Version: bi.GoVersion, PackageURL: goRef,
		Description: "the Go toolchain and standard library"}}
	refs := []string{goRef}
	for _, m := range bi.Deps {
		if m.Replace != nil {
			m = m.Replace
		}
		ref := purl(m.Path, m.Version)
		c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: m.Path, Version: m.Version, PackageURL: ref}
		if m.Sum != "" {
			c.Properties = &[]cdx.Property{{Name: "go:module:sum", Value: m.Sum}}
		}
		comps = append(comps, c)
		refs = append(refs, ref)
	}
	bom.Components = &comps
	bom.Dependencies = &[]cdx.Dependency{{Ref: mainRef, Dependencies: &refs}}
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return buf.Bytes(), nil
}

// purl is a Go module's package URL (purl-spec's golang type).
func purl(module, version string) string {
	if version == "" || version == "(devel)" {
		return "pkg:golang/" + module
	}
	return "pkg:golang/" + module + "@" + version
}

// uuidOf formats 16 bytes as a version 8 (custom) RFC 9562 UUID.
func uuidOf(b []byte) string {
	u := append([]byte(nil), b[:16]...)
	u[6] = u[6]&0x0f | 0x80
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// The platform an SBOM is of, on its artifact (the subject is the index, for all platforms).
const (
	annotationSBOMPlatform = "dev.kube-rdma.sbom.platform"
	annotationSBOMBinary   = "dev.kube-rdma.sbom.binary"
	annotationTitle        = "org.opencontainers.image.title"
)
