package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// The OCI image spec's media types and annotations (image-spec v1.1).
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	annotationRefName = "org.opencontainers.image.ref.name"
	// containerd's importer takes the full image name from this annotation; without it,
	// `ctr images import` needs --base-name.
	annotationContainerdName = "io.containerd.image.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type image struct {
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       imageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// layer is the gzip-compressed tar of the tree, with the digests the config and the manifest
// need: diffID of the uncompressed stream, digest of the compressed blob.
type layer struct {
	blob   []byte
	diffID string
	digest string
}

func buildLayer(t *tree) (layer, error) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz) // no name, no time: the same input gives the same bytes
	diff := sha256.New()
	if err := t.writeTar(io.MultiWriter(zw, diff)); err != nil {
		return layer{}, err
	}
	if err := zw.Close(); err != nil {
		return layer{}, fmt.Errorf("compress layer: %w", err)
	}
	return layer{blob: gz.Bytes(), diffID: digestOf(diff), digest: sha256Digest(gz.Bytes())}, nil
}

func sha256Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// writeLayout writes the image named name, with one layer holding t, as an OCI image layout
// (oci-layout, index.json, blobs/sha256/...) in the tar file out. The file is written next to
// out and renamed, so out is complete or absent.
func writeLayout(out, name string, cfg imageConfig, t *tree) (err error) {
	l, err := buildLayer(t)
	if err != nil {
		return err
	}
	var img image
	img.Architecture, img.OS, img.Config = runtime.GOARCH, "linux", cfg
	img.RootFS.Type, img.RootFS.DiffIDs = "layers", []string{l.diffID}
	cfgJSON, err := json.Marshal(img)
	if err != nil {
		return fmt.Errorf("encode image config: %w", err)
	}
	m := manifest{
		SchemaVersion: 2, MediaType: mediaTypeManifest,
		Config: descriptor{MediaType: mediaTypeConfig, Digest: sha256Digest(cfgJSON), Size: int64(len(cfgJSON))},
		Layers: []descriptor{{MediaType: mediaTypeLayer, Digest: l.digest, Size: int64(len(l.blob))}},
	}
	manJSON, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	idx := index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{{
		MediaType: mediaTypeManifest, Digest: sha256Digest(manJSON), Size: int64(len(manJSON)),
		Annotations: map[string]string{annotationRefName: name, annotationContainerdName: name},
		Platform:    &platform{Architecture: runtime.GOARCH, OS: "linux"},
	}}}
	idxJSON, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("encode index: %w", err)
	}

	f, err := os.CreateTemp(filepath.Dir(out), ".ocibuild-*")
	if err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	tw := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", idxJSON},
		{blobPath(m.Config.Digest), cfgJSON},
		{blobPath(idx.Manifests[0].Digest), manJSON},
		{blobPath(l.digest), l.blob},
	}
	for _, d := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return fmt.Errorf("write image: %w", err)
		}
	}
	for _, e := range files {
		h := &tar.Header{Name: e.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(e.data))}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("write image: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("write image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	return nil
}

func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}
