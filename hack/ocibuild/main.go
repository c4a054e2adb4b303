// Command ocibuild writes a single-layer container image as an OCI image layout in a tar
// file, from files on disk, without a container engine. CI and the local-node e2e build the
// kube-rdma, pause and test images with it and load them with `ctr -n k8s.io images import`;
// users with Docker build the same kube-rdma image from the Dockerfile.
//
//	ocibuild -o kube-rdma.tar -name localhost/kube-rdma:e2e \
//	  -file bin/device-plugin:/usr/local/bin/device-plugin:0755 \
//	  -tree /tmp/busybox-root:/ -entrypoint '["/usr/local/bin/device-plugin"]' -cmd '["run"]'
//
// The output depends only on the inputs: file times, owners and the image creation time are
// zero, entries are sorted. Only the standard library is used, so the main module's
// dependencies do not change.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ocibuild", flag.ContinueOnError)
	var (
		out, name, entrypoint, cmd, user, workdir string
		files, trees, dirs, env                   stringList
	)
	fs.StringVar(&out, "o", "", "output tar file (an OCI image layout)")
	fs.StringVar(&name, "name", "", "image reference, e.g. localhost/kube-rdma:e2e")
	fs.StringVar(&entrypoint, "entrypoint", "", "entrypoint as a JSON array")
	fs.StringVar(&cmd, "cmd", "", "command as a JSON array")
	fs.StringVar(&user, "user", "", "user (uid[:gid])")
	fs.StringVar(&workdir, "workdir", "", "working directory")
	fs.Var(&files, "file", "SRC:DST[:MODE] a file (mode in octal; default: the source's), repeatable")
	fs.Var(&trees, "tree", "DIR:DST every file, directory and symlink below DIR, repeatable")
	fs.Var(&dirs, "dir", "DST[:MODE] an empty directory, repeatable")
	fs.Var(&env, "env", "KEY=VALUE, repeatable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if out == "" || name == "" || fs.NArg() > 0 {
		return fmt.Errorf("need -o and -name, and no positional arguments")
	}
	var cfg imageConfig
	cfg.User, cfg.WorkingDir, cfg.Env = user, workdir, env
	if entrypoint != "" {
		if err := json.Unmarshal([]byte(entrypoint), &cfg.Entrypoint); err != nil {
			return fmt.Errorf("parse -entrypoint: %w", err)
		}
	}
	if cmd != "" {
		if err := json.Unmarshal([]byte(cmd), &cfg.Cmd); err != nil {
			return fmt.Errorf("parse -cmd: %w", err)
		}
	}

	var fsys tree
	for _, d := range dirs {
		dst, mode, err := splitMode(d, 0o755)
		if err != nil {
			return fmt.Errorf("-dir %q: %w", d, err)
		}
		fsys.addDir(dst, mode)
	}
	for _, f := range files {
		src, rest, ok := strings.Cut(f, ":")
		if !ok {
			return fmt.Errorf("-file %q: want SRC:DST[:MODE]", f)
		}
		dst, mode, err := splitMode(rest, 0)
		if err != nil {
			return fmt.Errorf("-file %q: %w", f, err)
		}
		if err := fsys.addFile(src, dst, mode); err != nil {
			return err
		}
	}
	for _, t := range trees {
		src, dst, ok := strings.Cut(t, ":")
		if !ok {
			return fmt.Errorf("-tree %q: want DIR:DST", t)
		}
		if err := fsys.addTree(src, dst); err != nil {
			return err
		}
	}
	return writeLayout(out, name, cfg, &fsys)
}
