//go:build tools

// Package tools names the commands of helm that e2e/local-node/build.sh builds, so that
// `go mod tidy` records their dependencies. It is never compiled.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
