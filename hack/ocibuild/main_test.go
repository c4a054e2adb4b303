package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
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

func TestImageLayout(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
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
	args := []string{"-name", "localhost/test:v1", "-file", bin + ":/usr/local/bin/tool:0755",
		"-tree", root + ":/", "-dir", "/tmp:1777", "-entrypoint", `["/usr/local/bin/tool"]`,
		"-cmd", `["run"]`, "-user", "0:0", "-env", "A=b"}
	out1, out2 := filepath.Join(dir, "1.tar"), filepath.Join(dir, "2.tar")
	for _, out := range []string{out1, out2} {
		if err := run(append([]string{"-o", out}, args...)); err != nil {
			t.Fatal(err)
		}
	}
	b1, _ := os.ReadFile(out1)
	b2, _ := os.ReadFile(out2)
	if !bytes.Equal(b1, b2) {
		t.Error("two builds of the same input differ")
	}

	files, _ := readTar(t, bytes.NewReader(b1))
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[annotationRefName] != "localhost/test:v1" {
		t.Fatalf("index: %+v", idx)
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files[blobPath(d.Digest)]
		if !ok || sha256Digest(b) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s missing or not matching its digest and size", d.Digest)
		}
		return b
	}
	var m manifest
	if err := json.Unmarshal(blob(idx.Manifests[0]), &m); err != nil {
		t.Fatal(err)
	}
	var img image
	if err := json.Unmarshal(blob(m.Config), &img); err != nil {
		t.Fatal(err)
	}
	wantCfg := imageConfig{User: "0:0", Env: []string{"A=b"}, Entrypoint: []string{"/usr/local/bin/tool"}, Cmd: []string{"run"}}
	if diff := cmp.Diff(wantCfg, img.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256Digest(raw); len(img.RootFS.DiffIDs) != 1 || img.RootFS.DiffIDs[0] != got {
		t.Errorf("diff_ids %v, layer's uncompressed digest %s", img.RootFS.DiffIDs, got)
	}
	_, headers := readTar(t, bytes.NewReader(raw))
	type got struct {
		Type byte
		Mode int64
		Link string
	}
	gotEntries := map[string]got{}
	for name, h := range headers {
		if h.Uid != 0 || h.Gid != 0 || !h.ModTime.Equal(headers["tmp/"].ModTime) {
			t.Errorf("%s: owner %d:%d, time %v", name, h.Uid, h.Gid, h.ModTime)
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
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-o", "x.tar"},
		{"-o", "x.tar", "-name", "a:b", "-file", "nocolon"},
		{"-o", "x.tar", "-name", "a:b", "-dir", "/tmp:99"},
		{"-o", "x.tar", "-name", "a:b", "-entrypoint", "not json"},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
