package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// readTar returns the regular files of a tar stream by name, and every entry's header.
func readTar(t *testing.T, r io.Reader) (map[string][]byte, map[string]*tar.Header) {
	t.Helper()
	files, headers := map[string][]byte{}, map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// fixture writes per-platform binaries (dir/linux_amd64/tool, dir/linux_arm64/tool) and a
// root tree with a directory, a file and a symlink; it returns ocibuild's arguments for them.
func fixture(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if err := os.MkdirAll(filepath.Join(dir, "linux_"+arch), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "linux_"+arch, "tool"), []byte("#!binary "+arch), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(dir, "root")
	for _, d := range []string{"root/lib/x86_64-linux-gnu", "root/lib64"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "lib/x86_64-linux-gnu/ld.so"), []byte("ld"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/x86_64-linux-gnu/ld.so", filepath.Join(root, "lib64/ld.so")); err != nil {
		t.Fatal(err)
	}
	return dir, []string{"-platform", "linux/amd64,linux/arm64", "-epoch", "1700000000",
		"-file", filepath.Join(dir, "{os}_{arch}", "tool") + ":/usr/local/bin/tool:0755",
		"-tree", root + ":/", "-dir", "/tmp:1777", "-entrypoint", `["/usr/local/bin/tool"]`,
		"-cmd", `["run"]`, "-user", "0:0", "-env", "A=b",
		"-annotation", "org.opencontainers.image.version=1.2.3",
		"-annotation", "org.opencontainers.image.revision=abc"}
}

// summaryOf runs ocibuild with args plus a layout in a new directory and returns its summary.
func summaryOf(t *testing.T, args []string) summary {
	t.Helper()
	out := t.TempDir()
	file := filepath.Join(out, "summary.json")
	if err := run(append([]string{"-name", "localhost/test:v1", "-layout", filepath.Join(out, "oci"), "-summary", file}, args...)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReproducible: the same files give the same digests; a changed byte in one platform's
// binary changes that platform's manifest and the index, not the other platform's; another
// epoch changes everything.
func TestReproducible(t *testing.T) {
	dir, args := fixture(t)
	first, second := summaryOf(t, args), summaryOf(t, args)
	if diff := cmp.Diff(first, second); diff != "" {
		t.Fatalf("two builds of the same files differ (-first +second):\n%s", diff)
	}
	if len(first.Manifests) != 2 {
		t.Fatalf("manifests: %+v", first.Manifests)
	}
	if err := os.WriteFile(filepath.Join(dir, "linux_arm64", "tool"), []byte("#!binary arm64, changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	changed := summaryOf(t, args)
	if changed.Index == first.Index || changed.Manifests[1].Digest == first.Manifests[1].Digest {
		t.Errorf("a changed arm64 file left the index or the arm64 manifest as they were: %+v", changed)
	}
	if changed.Manifests[0].Digest != first.Manifests[0].Digest {
		t.Errorf("a changed arm64 file changed the amd64 manifest: %s, was %s", changed.Manifests[0].Digest, first.Manifests[0].Digest)
	}
	later := summaryOf(t, append(args, "-epoch", "1700000001"))
	if later.Manifests[0].Layer == changed.Manifests[0].Layer || later.Index == changed.Index {
		t.Errorf("another epoch gave the same layer or index: %+v", later)
	}
}

// TestIndex: the index lists both platforms with their platform fields, index and manifests
// carry the annotations, each config has its architecture, the created time and the run
// configuration, and each layer's entries have the right modes, owner 0:0 and the epoch.
func TestIndex(t *testing.T) {
	_, args := fixture(t)
	sp := parse(t, args)
	b, err := build(sp)
	if err != nil {
		t.Fatal(err)
	}
	im, err := b.index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantAnns := map[string]string{
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
		"org.opencontainers.image.version":  "1.2.3",
		"org.opencontainers.image.revision": "abc",
	}
	if diff := cmp.Diff(wantAnns, im.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	var platforms []v1.Platform
	for _, d := range im.Manifests {
		platforms = append(platforms, *d.Platform)
		if d.MediaType != "application/vnd.oci.image.manifest.v1+json" || d.ArtifactType != "" {
			t.Errorf("%s: media type %s, artifact type %q", d.Digest, d.MediaType, d.ArtifactType)
		}
	}
	if diff := cmp.Diff([]v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	for i, d := range im.Manifests {
		img, err := b.index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantAnns, m.Annotations); diff != "" {
			t.Errorf("%s manifest annotations (-want +got):\n%s", platforms[i], diff)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != platforms[i].Architecture || cf.OS != "linux" || !cf.Created.Time.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s config: %s/%s created %v", platforms[i], cf.OS, cf.Architecture, cf.Created)
		}
		wantCfg := v1.Config{User: "0:0", Env: []string{"A=b"}, Entrypoint: []string{"/usr/local/bin/tool"}, Cmd: []string{"run"}}
		if diff := cmp.Diff(wantCfg, cf.Config); diff != "" {
			t.Errorf("%s run config (-want +got):\n%s", platforms[i], diff)
		}
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("%s layers: %d, %v", platforms[i], len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		files, headers := readTar(t, rc)
		_ = rc.Close()
		checkEntries(t, platforms[i].Architecture, files, headers)
	}
}

func checkEntries(t *testing.T, arch string, files map[string][]byte, headers map[string]*tar.Header) {
	t.Helper()
	type got struct {
		Type byte
		Mode int64
		Link string
	}
	gotEntries := map[string]got{}
	for name, h := range headers {
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("%s: owner %d:%d (%q:%q), time %v", name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
		}
		gotEntries[name] = got{h.Typeflag, h.Mode, h.Linkname}
	}
	want := map[string]got{
		"lib/":                       {tar.TypeDir, 0o755, ""},
		"lib/x86_64-linux-gnu/":      {tar.TypeDir, 0o755, ""},
		"lib/x86_64-linux-gnu/ld.so": {tar.TypeReg, 0o755, ""},
		"lib64/":                     {tar.TypeDir, 0o755, ""},
		"lib64/ld.so":                {tar.TypeSymlink, 0o777, "/lib/x86_64-linux-gnu/ld.so"},
		"tmp/":                       {tar.TypeDir, 0o1777, ""},
		"usr/":                       {tar.TypeDir, 0o755, ""},
		"usr/local/":                 {tar.TypeDir, 0o755, ""},
		"usr/local/bin/":             {tar.TypeDir, 0o755, ""},
		"usr/local/bin/tool":         {tar.TypeReg, 0o755, ""},
	}
	if diff := cmp.Diff(want, gotEntries); diff != "" {
		t.Errorf("%s layer entries (-want +got):\n%s", arch, diff)
	}
	if got := string(files["usr/local/bin/tool"]); got != "#!binary "+arch {
		t.Errorf("%s: /usr/local/bin/tool holds %q", arch, got)
	}
}

func parse(t *testing.T, args []string) spec {
	t.Helper()
	sp, _, err := parseArgs(append([]string{"-layout", "unused", "-name", "x:y"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// TestLayoutTar: one platform as a tar file, what `ctr images import` is given: index.json
// lists the image manifest with its name, every blob is there, two runs give the same bytes.
func TestLayoutTar(t *testing.T) {
	dir, args := fixture(t)
	args = append(args, "-platform", "linux/amd64")
	out1, out2 := filepath.Join(dir, "1.tar"), filepath.Join(dir, "2.tar")
	for _, out := range []string{out1, out2} {
		if err := run(append([]string{"-o", out, "-name", "localhost/test:v1"}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	b1, _ := os.ReadFile(out1)
	b2, _ := os.ReadFile(out2)
	if !bytes.Equal(b1, b2) {
		t.Error("two builds of the same input differ")
	}
	files, _ := readTar(t, bytes.NewReader(b1))
	var idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[annotationRefName] != "localhost/test:v1" ||
		idx.Manifests[0].Annotations[annotationContainerdName] != "localhost/test:v1" ||
		idx.Manifests[0].MediaType != "application/vnd.oci.image.manifest.v1+json" {
		t.Fatalf("index.json: %s", files["index.json"])
	}
	var m v1.Manifest
	blob := func(d v1.Hash) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+d.Hex]
		if !ok {
			t.Fatalf("blob %s missing", d)
		}
		if got, _, _ := v1.SHA256(bytes.NewReader(b)); got != d {
			t.Fatalf("blob %s has digest %s", d, got)
		}
		return b
	}
	if err := json.Unmarshal(blob(idx.Manifests[0].Digest), &m); err != nil {
		t.Fatal(err)
	}
	blob(m.Config.Digest)
	blob(m.Layers[0].Digest)
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-o", "x.tar"},
		{"-o", "x.tar", "-name", "a:b", "-file", "nocolon"},
		{"-o", "x.tar", "-name", "a:b", "-dir", "/tmp:99"},
		{"-o", "x.tar", "-name", "a:b", "-entrypoint", "not json"},
		{"-o", "x.tar", "-name", "a:b", "-platform", "linux"},
		{"-o", "x.tar", "-name", "a:b", "-epoch", "yesterday"},
		{"-o", "x.tar", "-name", "a:b", "-annotation", "novalue"},
		{"-o", "x.tar", "-name", "a:b", "-file", "/does/not/exist:/x"},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
