//go:build tools

// Package tools names the commands of containerd that e2e/local-node/build.sh builds, so that
// `go mod tidy` records their dependencies. It is never compiled.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
