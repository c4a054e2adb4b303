package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"path"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The OCI 1.1 empty config of an artifact: the two bytes "{}".
const mediaTypeEmpty = "application/vnd.oci.empty.v1+json"

// rawManifest is a manifest ocibuild serialized itself (go-containerregistry builds images
// and indexes, not artifacts with an empty config).
type rawManifest struct {
	raw       []byte
	mediaType types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mediaType, nil }

// artifactOf is the OCI artifact manifest that carries one SBOM, its subject the index,
// and its blobs (the empty config and the SBOM).
func artifactOf(f sbomFile, subject v1.Descriptor, created string) (rawManifest, []v1.Layer, error) {
	cfg := static.NewLayer([]byte("{}"), mediaTypeEmpty)
	doc := static.NewLayer(f.data, mediaTypeCycloneDX)
	cfgDesc, err := descriptorOf(cfg, nil)
	if err != nil {
		return rawManifest{}, nil, err
	}
	title := path.Base(f.summary.File)
	docDesc, err := descriptorOf(doc, map[string]string{annotationTitle: title})
	if err != nil {
		return rawManifest{}, nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: mediaTypeCycloneDX,
		Config: cfgDesc, Layers: []v1.Descriptor{docDesc}, Subject: &subject,
		Annotations: map[string]string{
			annotationCreated: created, annotationTitle: title,
			annotationSBOMPlatform: f.summary.Platform, annotationSBOMBinary: f.summary.Binary,
		},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return rawManifest{}, nil, fmt.Errorf("encode artifact manifest: %w", err)
	}
	return rawManifest{raw: raw, mediaType: types.OCIManifestSchema1}, []v1.Layer{cfg, doc}, nil
}

func descriptorOf(l v1.Layer, anns map[string]string) (v1.Descriptor, error) {
	d, err := l.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	n, err := l.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := l.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: n, Annotations: anns}, nil
}

// pushSBOMs pushes each SBOM to repo as an artifact whose subject is idx (already pushed),
// by digest, then reads the referrers of idx back and checks every one is listed. It returns
// how the registry keeps referrers: "api" or "tag" (go-containerregistry maintains the
// sha256-<hex> fallback tag index when the registry does not answer the Referrers API).
func pushSBOMs(repo name.Repository, idx v1.ImageIndex, sboms []sbomFile) (string, error) {
	subject, err := partialDescriptor(idx)
	if err != nil {
		return "", err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	want := map[v1.Hash]string{}
	for i := range sboms {
		m, blobs, err := artifactOf(sboms[i], subject, im.Annotations[annotationCreated])
		if err != nil {
			return "", err
		}
		for _, b := range blobs {
			if err := remote.WriteLayer(repo, b); err != nil {
				return "", fmt.Errorf("push sbom %s: %w", sboms[i].summary.File, err)
			}
		}
		d, _, err := v1.SHA256(bytes.NewReader(m.raw))
		if err != nil {
			return "", err
		}
		if err := remote.Put(repo.Digest(d.String()), m); err != nil {
			return "", fmt.Errorf("push sbom %s: %w", sboms[i].summary.File, err)
		}
		sboms[i].summary.Artifact = d.String()
		want[d] = sboms[i].summary.File
	}
	refs, err := remote.Referrers(repo.Digest(subject.Digest.String()))
	if err != nil {
		return "", fmt.Errorf("read referrers of %s: %w", subject.Digest, err)
	}
	got, err := refs.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, d := range got.Manifests {
		delete(want, d.Digest)
	}
	for d, f := range want {
		return "", fmt.Errorf("the registry does not list the sbom %s (%s) as a referrer of %s", f, d, subject.Digest)
	}
	return referrersMode(repo, subject.Digest)
}

func partialDescriptor(idx v1.ImageIndex) (v1.Descriptor, error) {
	d, err := idx.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	n, err := idx.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.OCIImageIndex, Digest: d, Size: n}, nil
}

// referrersMode asks the registry's Referrers API (anonymously) for subject: 200 is "api",
// 404 "tag"; anything else is reported as it is.
func referrersMode(repo name.Repository, subject v1.Hash) (string, error) {
	u := fmt.Sprintf("%s://%s/v2/%s/referrers/%s", repo.Registry.Scheme(), repo.RegistryStr(), repo.RepositoryStr(), subject)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("referrers api: %w", err)
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "api", nil
	case http.StatusNotFound:
		return "tag", nil
	}
	return fmt.Sprintf("unknown (referrers api: HTTP %d)", resp.StatusCode), nil
}

// referrersCmd prints the referrers of REF@DIGEST: artifactType, digest, platform, title.
func referrersCmd(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("ocibuild referrers", flag.ContinueOnError)
	insecure := fs.Bool("insecure", false, "plain HTTP to the registry")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: ocibuild referrers [-insecure] REPO@sha256:DIGEST")
	}
	var opts []name.Option
	if *insecure {
		opts = append(opts, name.Insecure)
	}
	d, err := name.NewDigest(fs.Arg(0), opts...)
	if err != nil {
		return err
	}
	idx, err := remote.Referrers(d)
	if err != nil {
		return fmt.Errorf("referrers of %s: %w", d, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, m := range im.Manifests {
		fmt.Fprintf(w, "%s %s %s %s\n", m.ArtifactType, m.Digest, m.Annotations[annotationSBOMPlatform], m.Annotations[annotationTitle])
	}
	return nil
}
