package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	annotationCreated = "org.opencontainers.image.created"
	annotationRefName = "org.opencontainers.image.ref.name"
	// containerd's importer takes the full image name from this annotation; without it,
	// `ctr images import` needs --base-name.
	annotationContainerdName = "io.containerd.image.name"
)

// platformImage is one platform's image and the files it was made of.
type platformImage struct {
	platform v1.Platform
	image    v1.Image
	tree     *tree
}

// built is the result of build: the index and its images, in -platform order.
type built struct {
	index  v1.ImageIndex
	images []platformImage
	epoch  time.Time
}

// build makes one image per platform of sp and the index of them.
func build(sp spec) (*built, error) {
	anns := map[string]string{annotationCreated: sp.epoch.Format(time.RFC3339)}
	for k, v := range sp.annotations {
		anns[k] = v
	}
	b := &built{epoch: sp.epoch}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, p := range sp.platforms {
		t, err := sp.tree(p)
		if err != nil {
			return nil, err
		}
		img, err := platformImageOf(t, p, sp.config, sp.epoch, anns)
		if err != nil {
			return nil, fmt.Errorf("build %s image: %w", p, err)
		}
		b.images = append(b.images, platformImage{platform: p, image: img, tree: t})
		p := p
		adds = append(adds, mutate.IndexAddendum{Add: image{img}, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	b.index = mutate.Annotations(idx, anns).(v1.ImageIndex)
	return b, nil
}

// image is an image whose index entry has no artifactType: go-containerregistry otherwise
// writes the config's media type there, which the image spec reserves for artifacts.
type image struct{ v1.Image }

func (image) ArtifactType() (string, error) { return "", nil }

// tree is the platform's file system: the directories, files and trees of sp in that order
// (a later entry for a path replaces an earlier one).
func (sp spec) tree(p v1.Platform) (*tree, error) {
	var t tree
	for _, d := range sp.dirs {
		t.addDir(d.dst, d.perm)
	}
	for _, f := range sp.files {
		if err := t.addFile(expand(f.src, p), f.dst, f.perm); err != nil {
			return nil, err
		}
	}
	for _, d := range sp.trees {
		if err := t.addTree(d[0], d[1]); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

// platformImageOf is the image of t for p: an OCI manifest with one gzip layer, the config
// dated epoch, annotated with anns.
func platformImageOf(t *tree, p v1.Platform, cfg v1.Config, epoch time.Time, anns map[string]string) (v1.Image, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		var buf bytes.Buffer
		if err := t.writeTar(&buf, epoch); err != nil {
			return nil, err
		}
		return io.NopCloser(&buf), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching) // compressed once, not per use
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "hack/ocibuild", Comment: "one layer: the files given",
	}})
	if err != nil {
		return nil, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return mutate.Annotations(img, anns).(v1.Image), nil
}

// writeLayout writes the build as an OCI image layout in dir (created; it must not exist or
// be empty). index.json names the image name: with one platform it lists that platform's
// manifest (what `ctr images import` has always been given here), with several the index.
func (b *built) writeLayout(dir, name string) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	opt := layout.WithAnnotations(map[string]string{annotationRefName: name, annotationContainerdName: name})
	if len(b.images) == 1 {
		err = p.AppendImage(b.images[0].image, opt, layout.WithPlatform(b.images[0].platform))
	} else {
		err = p.AppendIndex(b.index, opt)
	}
	if err != nil {
		return fmt.Errorf("write layout %s: %w", dir, err)
	}
	return nil
}

// writeLayoutTar writes the layout as a tar file: entries sorted, owner root, time epoch. The
// file is written next to out and renamed, so out is complete or absent.
func (b *built) writeLayoutTar(out, name string) (err error) {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".ocibuild-layout-*")
	if err != nil {
		return fmt.Errorf("write image: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := b.writeLayout(dir, name); err != nil {
		return err
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
	if err := tarDir(f, dir, b.epoch); err != nil {
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

// tarDir writes the directories and regular files below dir to w, sorted.
func tarDir(w io.Writer, dir string, mtime time.Time) error {
	var paths []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Typeflag: tar.TypeReg, Size: st.Size(), ModTime: mtime}
		switch {
		case st.IsDir():
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		case !st.Mode().IsRegular():
			return fmt.Errorf("%s is neither a file nor a directory", p)
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			if err := copyFile(tw, p, h.Size); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}
