//go:build tools

// Package tools names the command of go-containerregistry that e2e/local-node/build.sh
// builds, so that `go mod tidy` records its dependencies. It is never compiled.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
)
