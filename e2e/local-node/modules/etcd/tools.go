//go:build tools

// Package tools names the commands of etcd that e2e/local-node/build.sh builds, so that
// `go mod tidy` records their dependencies. It is never compiled.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
