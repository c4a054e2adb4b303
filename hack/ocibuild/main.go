// Command ocibuild builds a single-layer container image for one or more platforms from files
// on disk, without a container engine, on github.com/google/go-containerregistry: an OCI image
// index with one image manifest per platform. It writes the image as an OCI image layout (a
// tar file for `ctr images import`, or a directory), pushes it to a registry, and writes a
// CycloneDX SBOM of each Go binary it packs, pushed as an OCI artifact whose subject is the
// index. The local-node e2e (e2e/local-node/images.sh) and `make release` (hack/release.sh)
// build the kube-rdma image with it; users with Docker build the same image from the
// Dockerfile. It is a build tool: nothing shipped links it (internal/importrules).
//
//	ocibuild -o kube-rdma.tar -name localhost/kube-rdma:e2e \
//	  -file bin/device-plugin:/usr/local/bin/device-plugin:0755 \
//	  -dir /tmp:1777 -entrypoint '["/usr/local/bin/device-plugin"]' -cmd '["run"]'
//
//	ocibuild -platform linux/amd64,linux/arm64 -file 'bin/{os}_{arch}/device-plugin:/usr/local/bin/device-plugin:0755' \
//	  -epoch 1700000000 -annotation org.opencontainers.image.version=0.2.0 \
//	  -layout dist/oci -push 127.0.0.1:5000/kube-rdma:0.2.0 -sbom dist/sbom -summary dist/image.json
//
// {os} and {arch} in a -file source are replaced per platform. The output depends only on the
// inputs: entries are sorted, owned by 0:0, and dated -epoch (default $SOURCE_DATE_EPOCH, else
// 0), which is also the config's `created`, the history's and the
// org.opencontainers.image.created annotation of the index and each manifest.
//
//	ocibuild referrers REF@DIGEST     lists the referrers of a manifest (Referrers API, or the
//	                                  sha256-<hex> tag fallback), one "artifactType digest title" a line
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "referrers" {
		err = referrersCmd(os.Args[2:], os.Stdout)
	} else {
		err = run(os.Args[1:])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

// fileArg is one -file: its source may name {os} and {arch}.
type fileArg struct {
	src, dst string
	perm     int64
}

// spec is what the image is made of, for every platform.
type spec struct {
	platforms   []v1.Platform
	files       []fileArg
	trees       [][2]string // DIR, DST
	dirs        []fileArg   // dst, perm
	config      v1.Config
	epoch       time.Time
	annotations map[string]string
}

// outputs says where the image goes.
type outputs struct {
	tarFile, layoutDir, push, name, sbomDir, summary string
	insecure                                         bool
}

func run(args []string) error {
	sp, out, err := parseArgs(args)
	if err != nil {
		return err
	}
	b, err := build(sp)
	if err != nil {
		return err
	}
	return b.emit(out, os.Stderr)
}

// parseArgs reads ocibuild's flags into what to build and where it goes.
func parseArgs(args []string) (spec, outputs, error) {
	fail := func(err error) (spec, outputs, error) { return spec{}, outputs{}, err }
	fs := flag.NewFlagSet("ocibuild", flag.ContinueOnError)
	var (
		out                                  outputs
		entrypoint, cmd, platforms, epoch    string
		files, trees, dirs, env, annotations stringList
	)
	fs.StringVar(&out.tarFile, "o", "", "output tar file (an OCI image layout, for ctr images import)")
	fs.StringVar(&out.layoutDir, "layout", "", "output directory (an OCI image layout)")
	fs.StringVar(&out.push, "push", "", "push the index to this reference (host[:port]/repo:tag)")
	fs.BoolVar(&out.insecure, "insecure", false, "plain HTTP to the registry (always so for localhost, 127.0.0.1 and private addresses)")
	fs.StringVar(&out.name, "name", "", "image name for the layout's index.json, e.g. localhost/kube-rdma:e2e (default: -push)")
	fs.StringVar(&out.sbomDir, "sbom", "", "write a CycloneDX SBOM of each Go binary per platform here (DIR/OS_ARCH/NAME.cdx.json) and push each as a referrer of the index")
	fs.StringVar(&out.summary, "summary", "", "write the digests and SBOMs as JSON to this file")
	fs.StringVar(&platforms, "platform", "linux/"+runtime.GOARCH, "OS/ARCH[,OS/ARCH...]")
	fs.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "file times and creation time, in seconds since 1970 (default $SOURCE_DATE_EPOCH, else 0)")
	fs.StringVar(&entrypoint, "entrypoint", "", "entrypoint as a JSON array")
	fs.StringVar(&cmd, "cmd", "", "command as a JSON array")
	var sp spec
	fs.StringVar(&sp.config.User, "user", "", "user (uid[:gid])")
	fs.StringVar(&sp.config.WorkingDir, "workdir", "", "working directory")
	fs.Var(&files, "file", "SRC:DST[:MODE] a file (mode in octal; default: the source's); SRC may name {os} and {arch}; repeatable")
	fs.Var(&trees, "tree", "DIR:DST every file, directory and symlink below DIR, repeatable")
	fs.Var(&dirs, "dir", "DST[:MODE] an empty directory, repeatable")
	fs.Var(&env, "env", "KEY=VALUE, repeatable")
	fs.Var(&annotations, "annotation", "KEY=VALUE on the index and each manifest, repeatable")
	if err := fs.Parse(args); err != nil {
		return fail(err)
	}
	if out.name == "" {
		out.name = out.push
	}
	if fs.NArg() > 0 || (out.tarFile == "" && out.layoutDir == "" && out.push == "") {
		return fail(errors.New("need one of -o, -layout, -push, and no positional arguments"))
	}
	if (out.tarFile != "" || out.layoutDir != "") && out.name == "" {
		return fail(errors.New("-o and -layout need -name (or -push)"))
	}
	sp.config.Env = env
	if entrypoint != "" {
		if err := json.Unmarshal([]byte(entrypoint), &sp.config.Entrypoint); err != nil {
			return fail(fmt.Errorf("parse -entrypoint: %w", err))
		}
	}
	if cmd != "" {
		if err := json.Unmarshal([]byte(cmd), &sp.config.Cmd); err != nil {
			return fail(fmt.Errorf("parse -cmd: %w", err))
		}
	}
	if epoch != "" {
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil || s < 0 {
			return fail(fmt.Errorf("-epoch %q: want seconds since 1970", epoch))
		}
		sp.epoch = time.Unix(s, 0).UTC()
	} else {
		sp.epoch = time.Unix(0, 0).UTC()
	}
	for _, p := range strings.Split(platforms, ",") {
		os, arch, ok := strings.Cut(p, "/")
		if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
			return fail(fmt.Errorf("-platform %q: want OS/ARCH", p))
		}
		sp.platforms = append(sp.platforms, v1.Platform{OS: os, Architecture: arch})
	}
	sp.annotations = map[string]string{}
	for _, a := range annotations {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return fail(fmt.Errorf("-annotation %q: want KEY=VALUE", a))
		}
		sp.annotations[k] = v
	}
	for _, d := range dirs {
		dst, perm, err := splitMode(d, 0o755)
		if err != nil {
			return fail(fmt.Errorf("-dir %q: %w", d, err))
		}
		sp.dirs = append(sp.dirs, fileArg{dst: dst, perm: perm})
	}
	for _, f := range files {
		src, rest, ok := strings.Cut(f, ":")
		if !ok {
			return fail(fmt.Errorf("-file %q: want SRC:DST[:MODE]", f))
		}
		dst, perm, err := splitMode(rest, 0)
		if err != nil {
			return fail(fmt.Errorf("-file %q: %w", f, err))
		}
		sp.files = append(sp.files, fileArg{src: src, dst: dst, perm: perm})
	}
	for _, t := range trees {
		src, dst, ok := strings.Cut(t, ":")
		if !ok {
			return fail(fmt.Errorf("-tree %q: want DIR:DST", t))
		}
		sp.trees = append(sp.trees, [2]string{src, dst})
	}

	return sp, out, nil
}

// expand replaces {os} and {arch} in a -file source.
func expand(src string, p v1.Platform) string {
	return strings.NewReplacer("{os}", p.OS, "{arch}", p.Architecture).Replace(src)
}
