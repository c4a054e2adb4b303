package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// summary is what -summary writes: the digests a release reports and a later step reads.
type summary struct {
	Reference string            `json:"reference,omitempty"` // the pushed tag
	Index     string            `json:"index"`
	Manifests []manifestSummary `json:"manifests"`
	SBOMs     []sbomSummary     `json:"sboms,omitempty"`
	// Referrers says how the registry took the SBOM artifacts: "api" (it answers the OCI
	// Referrers API) or "tag" (the sha256-<hex> fallback tag index); empty when not pushed.
	Referrers string `json:"referrers,omitempty"`
}

type manifestSummary struct {
	Platform string `json:"platform"`
	Digest   string `json:"digest"`
	Config   string `json:"config"`
	Layer    string `json:"layer"`
}

type sbomSummary struct {
	Platform string `json:"platform"`
	Binary   string `json:"binary"` // path in the image
	File     string `json:"file"`   // path of the SBOM, under -sbom
	SHA256   string `json:"sha256"` // of the file
	Artifact string `json:"artifact,omitempty"`
}

// emit writes and pushes what out asks for, logging a line per step to log.
func (b *built) emit(out outputs, log io.Writer) error {
	d, err := b.index.Digest()
	if err != nil {
		return fmt.Errorf("index digest: %w", err)
	}
	s := summary{Index: d.String()}
	for _, pi := range b.images {
		ms, err := manifestSummaryOf(pi)
		if err != nil {
			return err
		}
		s.Manifests = append(s.Manifests, ms)
		fmt.Fprintf(log, "ocibuild: %s manifest %s\n", ms.Platform, ms.Digest)
	}
	fmt.Fprintf(log, "ocibuild: index %s\n", s.Index)
	if out.tarFile != "" {
		if err := b.writeLayoutTar(out.tarFile, out.name); err != nil {
			return err
		}
		fmt.Fprintf(log, "ocibuild: wrote %s\n", out.tarFile)
	}
	if out.layoutDir != "" {
		if err := b.writeLayout(out.layoutDir, out.name); err != nil {
			return err
		}
		fmt.Fprintf(log, "ocibuild: wrote %s\n", out.layoutDir)
	}
	var sboms []sbomFile
	if out.sbomDir != "" {
		if sboms, err = b.writeSBOMs(out.sbomDir); err != nil {
			return err
		}
	}
	if out.push != "" {
		var opts []name.Option
		if out.insecure {
			opts = append(opts, name.Insecure)
		}
		ref, err := name.ParseReference(out.push, opts...)
		if err != nil {
			return fmt.Errorf("-push %q: %w", out.push, err)
		}
		if err := remote.WriteIndex(ref, b.index); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		s.Reference = ref.String()
		fmt.Fprintf(log, "ocibuild: pushed %s@%s\n", ref, s.Index)
		if len(sboms) > 0 {
			if s.Referrers, err = pushSBOMs(ref.Context(), b.index, sboms); err != nil {
				return err
			}
			fmt.Fprintf(log, "ocibuild: pushed %d SBOMs as referrers of the index (registry: %s)\n", len(sboms), s.Referrers)
		}
	}
	for _, f := range sboms {
		s.SBOMs = append(s.SBOMs, f.summary)
	}
	if out.summary != "" {
		j, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return fmt.Errorf("encode summary: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(out.summary), 0o755); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
		if err := os.WriteFile(out.summary, append(j, '\n'), 0o644); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
	}
	return nil
}

func manifestSummaryOf(pi platformImage) (manifestSummary, error) {
	ms := manifestSummary{Platform: pi.platform.String()}
	d, err := pi.image.Digest()
	if err != nil {
		return ms, fmt.Errorf("%s manifest digest: %w", ms.Platform, err)
	}
	m, err := pi.image.Manifest()
	if err != nil {
		return ms, fmt.Errorf("%s manifest: %w", ms.Platform, err)
	}
	ms.Digest, ms.Config = d.String(), m.Config.Digest.String()
	if len(m.Layers) == 1 {
		ms.Layer = m.Layers[0].Digest.String()
	}
	return ms, nil
}

// platformKey is a platform as a file name part: linux_amd64.
func platformKey(p v1.Platform) string { return p.OS + "_" + p.Architecture }
