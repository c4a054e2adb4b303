//go:build tools

// Package tools names the CNI reference plugins the node's primary network uses, which
// e2e/local-node/build.sh builds, so that `go mod tidy` records their dependencies. It is
// never compiled.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/ipam/static"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
